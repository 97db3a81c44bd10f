"""Fixtures of the conformance tier: vLLM 0.31.0's own classes as the oracle."""

from __future__ import annotations

import pytest

from tests.conformance.oracle import VllmOracle
from tests.conformance.sched_oracle import VllmSchedOracle


@pytest.fixture(scope="session")
def vllm_oracle():
    """One vLLM driver process for the whole session (its import takes seconds).

    Fails, never skips, when .venv-vllm is missing: install it with
    `bash tests/conformance/setup_vllm.sh`.
    """
    oracle = VllmOracle()
    try:
        yield oracle
    finally:
        oracle.close()


@pytest.fixture(scope="session")
def vllm_sched_oracle():
    """One vLLM Scheduler driver process for the whole session (vllm_sched_driver.py).

    Fails, never skips, when .venv-vllm is missing: install it with
    `bash tests/conformance/setup_vllm.sh`.
    """
    oracle = VllmSchedOracle()
    try:
        yield oracle
    finally:
        oracle.close()
