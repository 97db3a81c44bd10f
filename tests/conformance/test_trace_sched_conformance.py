"""`replay --policy scheduler` against vLLM 0.31.0's own Scheduler and AsyncScheduler.

The first 200 shipped requests (block size 16, 5,000 blocks: requests queue for up to 46 s of
trace time, four are preempted and one is skipped), converted to an engine-step scenario
(tests/conformance/trace_sched.py) and replayed by vllm_sched_driver.py. Every request's hit
tokens (vLLM's num_cached_tokens) must equal ours, and vLLM must finish every request within
the steps our replay took. A missing .venv-vllm fails (install it with
`bash tests/conformance/setup_vllm.sh`).
"""

from __future__ import annotations

import pytest

from explorer.traffic.hashing import prepare
from explorer.traffic.scheduled import SchedulerPolicy, replay_scheduler
from explorer.traffic.sequential import replay_vllm
from explorer.traffic.trace import load_trace, shipped_trace_path
from tests.conformance.trace_sched import num_steps_of, trace_scenario, vllm_hits

pytestmark = pytest.mark.conformance

N, BLOCK_SIZE, NUM_BLOCKS = 200, 16, 5000


@pytest.fixture(scope="module")
def prepared():
    return prepare(load_trace(shipped_trace_path(), N), BLOCK_SIZE)


@pytest.mark.parametrize("scheduler", ["async", "sync"])
def test_first_200_shipped_requests_hit_as_in_vllm(vllm_sched_oracle, prepared, scheduler):
    policy = SchedulerPolicy(scheduler)
    ours = replay_scheduler(prepared, NUM_BLOCKS, policy)
    figures = ours.scheduler
    assert figures is not None
    scenario = trace_scenario(prepared.trace, BLOCK_SIZE, NUM_BLOCKS, policy, num_steps_of(figures, policy.step_ms))
    theirs = vllm_sched_oracle.replay(scenario)
    assert theirs["final"]["requests"] == {}, "vLLM finished every request within our steps"
    assert len(theirs["num_cached_tokens"]) == N - ours.skipped
    assert vllm_hits(theirs, N) == ours.hits
    assert theirs["final"]["stats"]["hits"] == ours.hit_tokens
    assert theirs["final"]["stats"]["preempted_hits"] == figures["preempted_hits"]
    assert sum(len(step.get("preempted", ())) for step in theirs["steps"]) == figures["preemptions"]
    # what makes this slice a test of the scheduler, not of the cache alone
    assert ours.skipped == 1 and figures["preemptions"] > 0 and figures["max_queueing_ms"] > 30_000
    assert ours.hit_tokens != replay_vllm(prepared, NUM_BLOCKS).hit_tokens  # one request at a time hits otherwise


# The driver's own checks (vectors, refusals, recorded answers) are 0.31.0's: pinned to it.
@pytest.fixture(scope="module")
def vllm_sched_oracle(vllm_oracles):
    from tests.conformance.oracle import RELEASES
    from tests.conformance.sched_oracle import VllmSchedOracle

    return vllm_oracles.get(VllmSchedOracle, RELEASES[0])
