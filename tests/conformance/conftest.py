"""Fixtures of the conformance tier: vLLM's own classes as the oracle, 0.31.0 and 0.33.0.

Every oracle fixture is parametrized over both releases (design section 15); a test asks its
oracle's ``vllm`` for the release our side replays under (`at_release`). A missing venv of
either release fails, never skips: install them with `bash tests/conformance/setup_vllm.sh`
and `bash tests/conformance/setup_vllm_033.sh`.
"""

from __future__ import annotations

import pytest

from tests.conformance.oracle import RELEASES, VllmOracle
from tests.conformance.sched_oracle import (
    VllmSchedAsyncConnectorDraftsOracle,
    VllmSchedAsyncDraftsOracle,
    VllmSchedOracle,
)


class Oracles:
    """One driver process per (kind, release), started on first use, kept for the session."""

    def __init__(self) -> None:
        self._held: dict[tuple[type, str], VllmOracle] = {}

    def get(self, kind: type[VllmOracle], vllm: str) -> VllmOracle:
        key = (kind, vllm)
        if key not in self._held:
            self._held[key] = kind(vllm=vllm)
        return self._held[key]

    def close(self) -> None:
        for oracle in self._held.values():
            oracle.begin_close()  # every driver ends at once: the session's teardown waits for the slowest
        for oracle in self._held.values():
            oracle.close()


@pytest.fixture(scope="session")
def vllm_oracles():
    held = Oracles()
    try:
        yield held
    finally:
        held.close()


@pytest.fixture(scope="session", params=RELEASES)
def vllm_oracle(request, vllm_oracles):
    """vLLM's KVCacheManager driver (vllm_driver.py) of one release."""
    return vllm_oracles.get(VllmOracle, request.param)


@pytest.fixture(scope="session", params=RELEASES)
def vllm_sched_oracle(request, vllm_oracles):
    """vLLM's Scheduler driver (vllm_sched_driver.py) of one release."""
    return vllm_oracles.get(VllmSchedOracle, request.param)


@pytest.fixture(scope="session", params=RELEASES)
def vllm_async_drafts_oracle(request, vllm_oracles):
    """vLLM's AsyncScheduler with drafts (vllm_sched_async_drafts_driver.py) of one release."""
    return vllm_oracles.get(VllmSchedAsyncDraftsOracle, request.param)


@pytest.fixture(scope="session", params=RELEASES)
def vllm_async_connector_drafts_oracle(request, vllm_oracles):
    """vLLM's AsyncScheduler with drafts and a KV connector
    (vllm_sched_async_connector_drafts_driver.py) of one release."""
    return vllm_oracles.get(VllmSchedAsyncConnectorDraftsOracle, request.param)
