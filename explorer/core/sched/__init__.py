"""The scheduler side of the core: the KV cache manager calls a vLLM scheduler makes, in its order."""
