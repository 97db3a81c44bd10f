"""The scheduler policy's clock (explorer/traffic/clock.py): every float checked before use, and
`arrival_step` exact and quick at the ends of its range (issue 28; issue 30 item 3)."""

from __future__ import annotations

import pytest

from explorer.errors import BadInput
from explorer.traffic.clock import MAX_STEP_INDEX, MAX_TIMESTAMP_MS, MIN_STEP_MS, arrival_step, check_step_ms
from explorer.traffic.scheduled import SchedulerPolicy
from explorer.traffic.sweep import run_sweep
from explorer.traffic.trace import parse_trace_bytes


@pytest.mark.parametrize("ts", [0.0, 1.0, 19.999, 20.0, 20.000001, 1e9, MAX_TIMESTAMP_MS])
@pytest.mark.parametrize("step", [MIN_STEP_MS, 0.3, 20.0, 3_600_000.0])
def test_arrival_step_is_the_first_step_at_or_after_the_timestamp(ts, step):
    k = arrival_step(ts, step)
    assert k * step >= ts and (k == 0 or (k - 1) * step < ts)


@pytest.mark.parametrize(
    "ts, step", [(1e300, 20.0), (1e308, 0.5), (100.0, 1e-300), (float("inf"), 20.0), (float("nan"), 20.0)]
)
def test_arrival_step_refuses_what_would_spin_or_overflow(ts, step):
    with pytest.raises(BadInput):
        arrival_step(ts, step)
    assert MAX_TIMESTAMP_MS / MIN_STEP_MS < MAX_STEP_INDEX  # a trace's timestamps never get here


@pytest.mark.parametrize("bad", [0, 1e-300, 5e-324, -1.0, float("nan"), float("inf"), 3_600_001.0, True, "20"])
def test_a_step_length_out_of_range_is_bad_input(bad):
    with pytest.raises(BadInput, match="step_ms must be a number in"):
        check_step_ms(bad)
    with pytest.raises(BadInput, match="step_ms must be a number in"):
        SchedulerPolicy(step_ms=bad).config()


@pytest.mark.parametrize("ts", ["1e300", "1e308", "100000000001", "-1"])
def test_a_trace_timestamp_out_of_range_is_bad_input(ts):
    line = f'{{"timestamp": {ts}, "input_length": 5, "output_length": 1, "hash_ids": [1]}}\n'
    with pytest.raises(BadInput, match=r"line 1: timestamp must be a number of ms in \[0, 1e\+11\]"):
        parse_trace_bytes(line.encode())


def test_the_scheduler_policy_decodes_outputs_under_the_output_cap():
    """Without --outputs the scheduler policy still decodes every output: capped alike."""
    trace = parse_trace_bytes(b'{"timestamp": 0, "input_length": 5, "output_length": 600, "hash_ids": [1]}\n' * 2)
    with pytest.raises(BadInput, match="scheduler policy decodes every output: 1,200 output tokens"):
        run_sweep(trace, 16, [100], ["scheduler"], max_output_tokens=1000)
    assert run_sweep(trace, 16, [100], ["vllm"], max_output_tokens=1000).runs  # it decodes none
    assert run_sweep(trace, 16, [100], ["scheduler"], max_output_tokens=1200).runs[0].policy == "scheduler"
