"""Shared fixtures of the prefill tests. Everything here runs on a CPU in float32 with one
torch thread: the machines that run the tests are small and shared."""

from __future__ import annotations

import os
import random

import pytest

try:
    import torch
except ImportError:  # the torch-free tests (estimate, validation, figure) still run
    torch = None
else:
    torch.set_num_threads(1)


@pytest.fixture
def fresh_seed() -> int:
    """A new seed every run (never a constant that could hide a lucky case); printed so a
    failure can be replayed."""
    seed = int.from_bytes(os.urandom(4), "little")
    print(f"seed = {seed}")
    random.seed(seed)
    return seed


@pytest.fixture
def tiny_model(fresh_seed: int):
    if torch is None:
        pytest.skip("needs torch")
    from explorer.prefill.configs import TINY
    from explorer.prefill.weights import load_model

    return load_model(TINY, "cpu", torch.float32, seed=fresh_seed)
