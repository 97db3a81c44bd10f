"""A faithful, pure-Python model of vLLM 0.31.0's engine-core prefix cache and scheduler calls, in vLLM's names."""
