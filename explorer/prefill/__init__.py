"""Measured prefill time saved: a small Llama-style model whose KV cache lives in the explorer's blocks."""
