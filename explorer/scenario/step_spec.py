"""Engine-step scenarios (design section 7): what makes one, its engine keys, its ops' rules.

A scenario containing a `step` op is an engine-step scenario: it is replayed through the
mirrored scheduler (explorer/core/sched/) instead of op by op through the manager. Its ops are
`arrive` (with `output`), `step`, `abort` and `reset` (with `external`); the manager-level ops
are bad input there, and `abort`, `output` and `external` are bad input in a manager-level one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any

from explorer.core.errors import BadInput
from explorer.scenario.parse_connector import ARRIVE_KEYS

SCHEDULERS = ("async", "sync")
MANAGER_ONLY_OPS = ("admit", "sample", "decode", "generate", "finish", "preempt")
# Keys only an engine-step scenario's ops take, per op.
STEP_ONLY_KEYS = {"arrive": ("output", *ARRIVE_KEYS), "reset": ("external",)}
# Keys an engine-step `arrive` refuses: vLLM's scheduler mirror runs text-only requests.
STEP_REFUSED_ARRIVE_KEYS = ("text", "mm")
# `expect` keys on what vLLM's metrics export after a step (design section 11): the counters'
# values and the log line's window rate, recorded from the updates' reports (engine_steps.py).
METRIC_EXPECT_TYPES = {
    "metric_queries": "an integer",  # vllm:prefix_cache_queries_total
    "metric_hits": "an integer",  # vllm:prefix_cache_hits_total
    "metric_external_queries": "an integer",  # vllm:external_prefix_cache_queries_total
    "metric_external_hits": "an integer",  # vllm:external_prefix_cache_hits_total
    "metric_preemptions": "an integer",  # vllm:num_preemptions_total
    "metric_prompt_tokens_by_source": "a table of integers",  # vllm:prompt_tokens_by_source_total
    "log_hit_rate": "a string",  # the log line's "Prefix cache hit rate: X%" ("" while it shows none)
}
STEP_EXPECT_KEYS = frozenset({"scheduled", "preempted", "finished", *METRIC_EXPECT_TYPES})
# Every size has a cap: a step budget larger than this is bad input.
MAX_BUDGET = 1 << 24


@dataclass(frozen=True)
class SchedSpec:
    """The engine keys of an engine-step scenario (defaults as design section 7 shows)."""

    scheduler: str = "async"
    max_num_batched_tokens: int = 2048
    max_num_seqs: int = 64
    long_prefill_token_threshold: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


SCHED_DEFAULTS: dict[str, Any] = SchedSpec().as_dict()


def is_engine_step_scenario(steps: Any) -> bool:
    """A scenario is an engine-step scenario iff one of its steps is a `step` op."""
    return isinstance(steps, list) and any(isinstance(s, Mapping) and s.get("op") == "step" for s in steps)


def parse_sched(
    fail: Callable[[str, str], BadInput], raw: Any, engine_steps: bool, max_model_len: int
) -> SchedSpec | None:
    """The scheduler keys of ``[engine]`` (None for a manager-level scenario, which must not
    set them); vLLM's own refusals are bad input here."""
    raw = raw if isinstance(raw, Mapping) else {}
    given = [k for k in SCHED_DEFAULTS if k in raw]
    if not engine_steps:
        if given:
            raise fail(f"engine.{given[0]}", "only an engine-step scenario (one with a `step` op) takes this key")
        return None
    v = {**SCHED_DEFAULTS, **{k: raw[k] for k in given}}
    if v["scheduler"] not in SCHEDULERS:
        raise fail("engine.scheduler", f'expected "async" or "sync", got {v["scheduler"]!r}')

    def count(key: str, lo: int, hi: int) -> int:
        value = v[key]
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            raise fail(f"engine.{key}", f"expected an integer in [{lo}, {hi:,}], got {value!r}")
        return value

    budget = count("max_num_batched_tokens", 1, MAX_BUDGET)
    seqs = count("max_num_seqs", 1, MAX_BUDGET)
    if budget < seqs:
        raise fail(
            "engine.max_num_batched_tokens",
            f"{budget} is below max_num_seqs = {seqs} (vLLM refuses a budget smaller than the batch)",
        )
    threshold = count("long_prefill_token_threshold", 0, max_model_len)
    return SchedSpec(v["scheduler"], budget, seqs, threshold)


def kind_error(op: str, keys: set[str], engine_steps: bool) -> tuple[str, str] | None:
    """(field, message) saying why ``op`` with ``keys`` does not belong in this kind of
    scenario, or None when it does."""
    if engine_steps:
        if op in MANAGER_ONLY_OPS:
            return "op", (
                f"`{op}` is a manager-level op; an engine-step scenario (one with a `step` op) "
                "takes only arrive, step, abort and reset"
            )
        if op == "arrive":
            for key in STEP_REFUSED_ARRIVE_KEYS:
                if key in keys:
                    return key, "not supported in an engine-step scenario (give `prompt` as token ids)"
            if "output" not in keys:
                return "output", "missing: an engine-step `arrive` needs the tokens the model will sample"
        return None
    if op == "abort":
        return "op", "`abort` belongs to engine-step scenarios (add a `step` op); a manager-level one uses `finish`"
    for only in STEP_ONLY_KEYS.get(op, ()):
        if only in keys:
            return only, "only an engine-step scenario (one with a `step` op) takes this key"
    return None
