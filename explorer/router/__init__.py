"""A prefix-aware router over a simulated vLLM fleet: what KV events buy it, and how it breaks."""
