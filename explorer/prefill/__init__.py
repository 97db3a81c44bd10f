"""Measured prefill time saved: a small Llama-style model whose KV cache lives in the blocks that
the explorer's BlockPool hands out.

- ``configs``: the three model shapes and their parameter counts (torch-free);
- ``estimate``: FLOP counts and the back-of-envelope prefill estimate (torch-free);
- ``validate``: the checks every entry point runs before any heavy import (torch-free);
- ``paged_kv``, ``attention``, ``model``, ``weights``: the torch model and its paged KV pool;
- ``timing``: CUDA events on a GPU, a monotonic clock on a CPU;
- ``engine``: requests through the KV cache manager, their KV in the pool (A, then B twice);
- ``measure``: full vs cached prefill of one request, timed, with correctness checks;
- ``cli``: ``python -m explorer prefill``.

Nothing here imports torch, gguf or tokenizers at package import time: a GPU box with only
torch and numpy must be able to run the measurement (scripts/gpu_check.py), and the UI must be
able to show the estimate on a machine without torch.
"""
