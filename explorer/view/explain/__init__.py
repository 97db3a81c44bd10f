"""What a step did, in plain sentences built from its numbers, with vLLM 0.31.0 references."""
