"""Speculative decoding in a scenario (design section 9): `engine.speculative`, `draft_tokens`
on a manager-level `decode`, `accepted` on an engine-step `arrive`.

``[engine] speculative = { method = "eagle", num_speculative_tokens = 3 }`` turns on the
EAGLE-family hit drop and the lookahead slots of every allocation (core/sched/speculative.py).
The methods are vLLM's names; those vLLM 0.31.0 refuses for the model the scenarios stand
for (a small Llama, what the conformance tier builds) are bad input, in vLLM's words. With
``speculative``, an engine-step scenario runs under either scheduler; under the async one a
KV connector is not modelled (bad input). A `decode` with ``draft_tokens = d`` verifies d drafts, and the next op on that request
must be a `sample` of 1 to d + 1 tokens (the accepted drafts and a bonus token).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from explorer.core.errors import BadInput, ConfigError
from explorer.core.sched.speculative import SPEC_METHODS, SpeculativeConfig
from explorer.scenario.ops import Decode, EngineArrive, Op, Reset, Sample
from explorer.scenario.step_spec import SchedSpec

SPEC_KEY = "speculative"
SPEC_TABLE_KEYS = ("method", "num_speculative_tokens")
# Every size has a cap (vLLM has none; no drafter proposes this many).
MAX_SPEC_TOKENS = 64
# What vLLM 0.31.0 answers for a Llama target on the CPU (SpeculativeConfig / VllmConfig).
REFUSED_METHODS = {
    "mtp": "Unsupported speculative method: 'mtp' (an MTP drafter needs a model with MTP layers)",
    "dflash": "Model architectures ['DFlashLlamaForCausalLM'] are not supported for now",
    "dspark": "Model Runner V1 does not support: dspark speculative decoding",
}

Fail = Callable[[str, str], BadInput]


def _count(fail: Fail, where: str, value: Any, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise fail(where, f"expected an integer in [{lo}, {hi}], got {value!r}"[:200])
    return value


def parse_speculative(fail: Fail, raw_engine: Any, sched: SchedSpec | None) -> SpeculativeConfig | None:
    """``engine.speculative`` (None when absent); bad input where vLLM or the contract refuses."""
    raw = raw_engine.get(SPEC_KEY) if isinstance(raw_engine, Mapping) else None
    if raw is None:
        return None
    where = f"engine.{SPEC_KEY}"
    if not isinstance(raw, Mapping):
        raise fail(where, 'expected a table like { method = "eagle", num_speculative_tokens = 3 }')
    unknown = sorted(set(map(str, raw)) - set(SPEC_TABLE_KEYS))
    if unknown or "method" not in raw:
        bad = f"unknown key {unknown[0][:40]!r}" if unknown else "missing `method`"
        raise fail(where, f"{bad} (it takes: {', '.join(SPEC_TABLE_KEYS)})")
    method = raw["method"]
    if not isinstance(method, str) or method not in SPEC_METHODS:
        raise fail(f"{where}.method", f"unknown method {method!r:.60} (vLLM's names: {', '.join(SPEC_METHODS)})")
    if method in REFUSED_METHODS:
        raise fail(f"{where}.method", f"vLLM refuses {method!r} for this model: {REFUSED_METHODS[method]}")
    if "num_speculative_tokens" not in raw:
        raise fail(where, "missing `num_speculative_tokens`")
    k = _count(fail, f"{where}.num_speculative_tokens", raw["num_speculative_tokens"], 1, MAX_SPEC_TOKENS)
    config = SpeculativeConfig(method, k)
    if sched is not None:
        try:
            config.check(sched.max_num_batched_tokens, sched.scheduler == "async", sched.long_prefill_token_threshold)
        except ConfigError as e:
            raise fail(where, str(e)) from None
    return config


def _accepted(fail: Fail, where: str, value: Any, k: int, num_output: int) -> tuple[int, ...]:
    if not isinstance(value, list):
        raise fail(where, "expected an array of integers (drafts accepted at each decode step)")
    if len(value) > num_output:
        raise fail(where, f"{len(value)} entries, more than the {num_output} decode steps `output` allows")
    return tuple(_count(fail, where, a, 0, k) for a in value)


def apply_spec_ops(
    fail: Fail, ops: tuple[Op, ...], raw_steps: Sequence[Any], speculative: SpeculativeConfig | None
) -> tuple[Op, ...]:
    """The ops with their `draft_tokens` / `accepted` read, and the draft rule checked: after a
    `decode` with drafts, the next op on that request is a `sample` of 1 to d + 1 tokens."""
    out: list[Op] = []
    pending: dict[str, int] = {}  # request id -> drafts its last decode verifies
    for op, raw in zip(ops, raw_steps, strict=True):
        for key in ("draft_tokens", "accepted"):
            if key in raw and speculative is None:
                raise fail(f"{op.label}: {key}", "needs engine.speculative (speculative decoding is off)")
        if "draft_tokens" in raw:
            assert speculative is not None and isinstance(op, Decode)  # only `decode` takes the key
            n = _count(fail, f"{op.label}: draft_tokens", raw["draft_tokens"], 1, speculative.num_speculative_tokens)
            op = replace(op, draft_tokens=n)
        if "accepted" in raw:
            assert speculative is not None
            if not isinstance(op, EngineArrive):
                raise fail(
                    f"{op.label}: accepted", "only an engine-step scenario (one with a `step` op) takes this key"
                )
            accepted = _accepted(
                fail, f"{op.label}: accepted", raw["accepted"], speculative.num_speculative_tokens, len(op.output)
            )
            op = replace(op, accepted=accepted)
        if isinstance(op, Reset) and op.running:
            pending.clear()  # every running request is preempted: its drafts are gone
        elif op.id is not None and op.id in pending:
            d = pending.pop(op.id)
            if not isinstance(op, Sample):
                raise fail(
                    f"{op.label}: op",
                    f"request {op.id!r} is verifying {d} drafts: its next op must be `sample` (the accepted "
                    "drafts and a bonus token)",
                )
            n = len(op.tokens)
            if not 1 <= n <= d + 1:
                raise fail(f"{op.label}: tokens", f"{n} tokens after a decode of {d} drafts: expected 1 to {d + 1}")
        if isinstance(op, Decode) and op.draft_tokens is not None:
            pending[op.id] = op.draft_tokens
        out.append(op)
    return tuple(out)
