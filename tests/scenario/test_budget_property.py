"""Refuse before the work (issue 28): random scenarios near each cap, at both levels and with
every feature, against the caps the budget counts before a replay starts.

For each drawn scenario and each cap counted here (extra-key characters, snapshot block
entries, engine-step request records), the test finds the scenario's own threshold ``t`` (the
least cap that accepts it) and checks:
- at ``t - 1`` it is refused with one `BadInput` naming the limit, within a generous time and
  tracemalloc peak, before any replay;
- at ``t`` it replays, and what the replay really holds (block entries in its snapshots,
  request records of its steps, extra-key characters of its hashed blocks) is at most ``t``:
  the count is an upper bound, so a refusal is never too late.
A second property scales the drawn scenario far past the command line's caps and checks that
the real caps refuse it within 2 s and 64 MiB of Python allocations.
"""

from __future__ import annotations

import time
import tracemalloc
from dataclasses import replace
from typing import Any

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from explorer.errors import BadInput
from explorer.scenario.budget import check_replay_budget, snapshot_cells, step_records
from explorer.scenario.engine import replay
from explorer.scenario.parse import parse_scenario_dict
from explorer.scenario.randgen import random_scenario
from explorer.scenario.recorder import StepError
from explorer.scenario.records import HashedBlock
from explorer.scenario.spec import CLI_LIMITS, Limits
from explorer.scenario.trace import Snapshot, Trace

ROOMY = Limits(
    max_snapshot_cells=1 << 40, max_step_records=1 << 40, max_extra_key_chars=1 << 40, max_recorded_decodes=1 << 40
)
REFUSAL_S = 2.0  # generous: a refusal is a count over the parsed ops
REFUSAL_PEAK = 64 << 20


# ---- scenarios ---------------------------------------------------------------------------------


@st.composite
def engine_step_raw(draw) -> dict[str, Any]:
    """An engine-step scenario with any of: hybrid groups (full + window, window only),
    speculative decoding with accepted drafts, a static or offloading KV connector, LoRA,
    cache salts, aborts, resets, async or sync scheduling."""
    bs = draw(st.sampled_from([4, 8, 16]))
    seqs = draw(st.integers(1, 6))
    engine: dict[str, Any] = {
        "block_size": bs,
        "num_blocks": draw(st.integers(24, 160)),
        "scheduler": draw(st.sampled_from(["sync", "async"])),
        "max_num_seqs": seqs,
        "max_num_batched_tokens": draw(st.integers(max(seqs, 8), 200)),
    }
    feature = draw(st.sampled_from(["plain", "full+window", "window", "speculative", "static", "offloading"]))
    if feature in ("speculative", "static", "offloading"):
        engine["scheduler"] = "sync"  # drafts and connectors run under the sync scheduler here
    if feature == "full+window":
        engine["kv_cache_groups"] = [{"kind": "full_attention"}, {"kind": "sliding_window", "sliding_window": 2 * bs}]
    elif feature == "window":
        engine["kv_cache_groups"] = [{"kind": "sliding_window", "sliding_window": 2 * bs}]
    elif feature == "speculative":
        engine["speculative"] = {"method": "eagle", "num_speculative_tokens": draw(st.integers(1, 3))}
    elif feature == "static":
        engine["kv_connector"] = {"kind": "static", "load": "sync", "failure_policy": "recompute"}
    elif feature == "offloading":
        engine["kv_connector"] = {"kind": "offloading", "cpu_blocks": draw(st.integers(1, 16))}
    steps: list[dict[str, Any]] = []
    arrived: list[str] = []
    for n in range(draw(st.integers(1, 6))):
        rid = f"R{n}"
        prompt_len = draw(st.integers(1, 5 * bs))
        out_len = draw(st.integers(1, 3 * bs))
        arrive: dict[str, Any] = {"op": "arrive", "id": rid, "prompt": f"{n * 1000}:{n * 1000 + prompt_len}"}
        arrive["output"] = f"7*{out_len}"
        if draw(st.booleans()):
            arrive["lora"] = "adapter-" + "x" * draw(st.integers(0, 40))
        if draw(st.booleans()):
            arrive["cache_salt"] = "salt-" + "y" * draw(st.integers(0, 40))
        if feature == "speculative":
            k = engine["speculative"]["num_speculative_tokens"]
            arrive["accepted"] = draw(st.lists(st.integers(0, k), max_size=out_len))
        if feature == "static" and draw(st.booleans()):
            arrive["external_tokens"] = bs * draw(st.integers(0, (prompt_len - 1) // bs))
        steps.append(arrive)
        arrived.append(rid)
        steps += [{"op": "step"}] * draw(st.integers(0, 6))
        if draw(st.integers(0, 9)) == 0:
            steps.append({"op": "abort", "id": draw(st.sampled_from(arrived))})
    steps += [{"op": "step"}] * draw(st.integers(1, 40))
    return {"engine": engine, "steps": steps}


@st.composite
def manager_level_raw(draw) -> dict[str, Any]:
    """A manager-level scenario of the random generator (its profiles draw hybrid groups,
    LoRA, salts, images, prompt logprobs, preemptions, resets), as raw steps."""
    profile = draw(st.sampled_from(["mixed", "hybrid"]))
    return random_scenario(draw(st.integers(0, 10_000)), draw(st.integers(4, 40)), profile=profile)


any_raw = st.one_of(engine_step_raw(), manager_level_raw())


# ---- what a replay really holds ------------------------------------------------------------------


def _snapshots(trace: Trace) -> list[Snapshot]:
    if trace.states is not None:  # a recorded replay: every step's state, as its readers see it
        return [trace.snapshot_at(k) for k in range(len(trace.steps) + 1)]
    return [trace.initial, trace.final]


def held_cells(trace: Trace) -> int:
    """Block entries the snapshots hold: the pool's, each request's tables, the CPU tier's."""
    total = 0
    for snap in _snapshots(trace):
        total += len(snap.blocks) + len(snap.cpu_tier or ())
        for r in snap.requests:
            total += len(r.block_ids) + sum(len(g) for g in r.block_ids_by_group)
    return total


def held_records(trace: Trace) -> int:
    """Request records the steps keep: the larger of each step's batch and outputs."""
    total = 0
    for s in trace.steps:
        es = s.engine_step
        if es is not None:
            total += max(len(es.scheduled), len(es.outputs), 0 if es.update is None else len(es.update.outputs))
    return total


def held_extra_chars(trace: Trace) -> int:
    """Characters of the extra keys (LoRA names and paths, salts, image ids; not their tags) of
    every hashed block."""
    return sum(
        len(x)
        for s in trace.steps
        for h in s.of(HashedBlock)
        for key in h.extra_keys or ()
        for x in key[1:]
        if isinstance(x, str)
    )


# ---- the caps ------------------------------------------------------------------------------------


def _parse(raw: dict[str, Any], limits: Limits):
    return parse_scenario_dict(raw, "p.toml", limits)


def _accepts(raw: dict[str, Any], limits: Limits, record: bool) -> bool:
    try:
        scenario = _parse(raw, limits)
        check_replay_budget(scenario, limits, record)
    except BadInput:
        return False
    return True


def _threshold(raw: dict[str, Any], field: str, record: bool, hi: int) -> int:
    """The least value of ``field`` at which the scenario is accepted (binary search)."""
    lo = 0
    while lo < hi:
        mid = (lo + hi) // 2
        if _accepts(raw, replace(ROOMY, **{field: mid}), record):
            hi = mid
        else:
            lo = mid + 1
    return lo


def _refusal(raw: dict[str, Any], limits: Limits, record: bool) -> str:
    try:
        replay(_parse(raw, limits), record=record, limits=limits)
    except BadInput as e:
        return str(e)
    raise AssertionError("not refused")


def _refused_quickly(raw: dict[str, Any], limits: Limits, record: bool) -> str:
    """The refusal's time (measured alone: tracemalloc slows Python) and peak allocations."""
    t0 = time.perf_counter()
    message = _refusal(raw, limits, record)
    elapsed = time.perf_counter() - t0
    tracemalloc.start()
    try:
        _refusal(raw, limits, record)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert elapsed < REFUSAL_S and peak < REFUSAL_PEAK, (elapsed, peak)
    assert "limit" in message and "\n" not in message, message
    return message


CAPS = [
    ("max_snapshot_cells", held_cells),
    ("max_step_records", held_records),
    ("max_extra_key_chars", held_extra_chars),
]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=any_raw, record=st.booleans(), cap=st.sampled_from(CAPS))
def test_each_cap_refuses_below_the_threshold_and_bounds_what_the_replay_holds(raw, record, cap):
    field, held = cap
    scenario = _parse(raw, ROOMY)
    estimate = {
        "max_snapshot_cells": snapshot_cells(scenario, record),
        "max_step_records": step_records(scenario),
    }.get(field)
    if estimate is None:  # counted while the steps are read: found by bisection
        t = _threshold(raw, field, record, hi=1 << 26)
    else:  # the budget refuses exactly above its own count
        t = estimate
        assert _accepts(raw, replace(ROOMY, **{field: t}), record)
    at_cap = replace(ROOMY, **{field: t})
    try:
        trace = replay(_parse(raw, at_cap), record=record, limits=at_cap)
    except StepError:  # an op the engine's state refuses mid-replay (say an abort's id reused)
        assume(False)
    assert held(trace) <= t, (field, held(trace), t)
    if t > 0:
        _refused_quickly(raw, replace(ROOMY, **{field: t - 1}), record)


def _scaled(raw: dict[str, Any], factor: int) -> dict[str, Any]:
    """The scenario with every `step` op repeated ``factor`` times (an engine-step one) or its
    engine pool and arrivals grown (a manager-level one), far past the command line's caps."""
    engine = dict(raw["engine"])
    if any(s.get("op") == "step" for s in raw["steps"]):
        engine["max_num_seqs"] = engine["max_num_batched_tokens"] = 4096
        steps = [s for s in raw["steps"] if s.get("op") != "step"]
        arrivals = [s for s in steps if s.get("op") == "arrive"]
        many = [dict(a, id=f"{a['id']}-{i}") for i in range(40) for a in arrivals[:1]]
        return {"engine": engine, "steps": steps + many + [{"op": "step"}] * factor}
    engine["num_blocks"] = 1 << 19
    return {"engine": engine, "steps": raw["steps"] * min(factor, 4)}


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=any_raw, record=st.booleans())
def test_a_scenario_far_past_the_caps_is_refused_within_2_s_and_64_mib(raw, record):
    big = _scaled(raw, 10_000)
    try:
        scenario = _parse(big, CLI_LIMITS)
    except BadInput:
        return  # refused while its steps are read (the parse-time caps, tested elsewhere)
    fits = snapshot_cells(scenario, record) <= CLI_LIMITS.max_snapshot_cells
    if fits and step_records(scenario) <= CLI_LIMITS.max_step_records:
        return  # a lean manager-level replay that fits: nothing to refuse
    _refused_quickly(big, CLI_LIMITS, record)
