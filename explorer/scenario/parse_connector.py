"""The KV connector keys of an engine-step scenario (design section 10).

``[engine] kv_connector = { kind = "static", load = "async", failure_policy = "fail" }`` (or
``kind = "offloading", cpu_blocks = N``: required, 1 to MAX_CPU_BLOCKS), and on `arrive` (``static`` only) ``external_tokens``,
``external_load``, ``load_steps`` and ``invalid_external_blocks``. Everything vLLM would refuse
or raise on is bad input here, before the replay: a connector in a manager-level scenario,
``external_tokens`` beyond the prompt, a sync load covering the whole prompt (vLLM asserts),
block indices outside the request.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from explorer.core.errors import BadInput

KINDS = ("static", "offloading")
LOADS = ("async", "sync")
POLICIES = ("fail", "recompute")
CONNECTOR_KEYS = {"static": {"kind", "load", "failure_policy"}, "offloading": {"kind", "failure_policy", "cpu_blocks"}}
ARRIVE_KEYS = ("external_tokens", "external_load", "load_steps", "invalid_external_blocks")
EXPECT_STATS = ("stats_external_requests", "stats_external_queries", "stats_external_hits")
MAX_LOAD_STEPS = 1 << 16  # every size has a cap
MAX_CPU_BLOCKS = 1 << 20

Fail = Callable[[str, str], BadInput]


@dataclass(frozen=True)
class ConnectorSpec:
    kind: str = "static"
    load: str = "async"
    failure_policy: str = "fail"
    cpu_blocks: int = 0

    def as_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"kind": self.kind, "failure_policy": self.failure_policy}
        if self.kind == "static":
            d["load"] = self.load
        else:
            d["cpu_blocks"] = self.cpu_blocks
        return d


@dataclass(frozen=True)
class ExternalSpec:
    """What the static store holds for one arriving request."""

    tokens: int
    load: str
    load_steps: int = 1
    invalid_blocks: tuple[int, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {
            "external_tokens": self.tokens,
            "external_load": self.load,
            "load_steps": self.load_steps,
            "invalid_external_blocks": list(self.invalid_blocks),
        }


def _count(fail: Fail, where: str, value: Any, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise fail(where, f"expected an integer in [{lo}, {hi:,}], got {value!r}")
    return value


def _choice(fail: Fail, where: str, value: Any, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise fail(where, f"expected one of {', '.join(repr(c) for c in choices)}, got {value!r}")
    return str(value)


def parse_connector(fail: Fail, raw_engine: Any, engine_steps: bool) -> ConnectorSpec | None:
    """``engine.kv_connector`` (None when absent)."""
    if not isinstance(raw_engine, Mapping) or "kv_connector" not in raw_engine:
        return None
    where = "engine.kv_connector"
    if not engine_steps:
        raise fail(where, "only an engine-step scenario (one with a `step` op) takes a KV connector")
    raw = raw_engine["kv_connector"]
    if not isinstance(raw, Mapping):
        raise fail(where, 'expected a table like { kind = "static", load = "async" }')
    kind = _choice(fail, f"{where}.kind", raw.get("kind", "static"), KINDS)
    unknown = sorted(set(map(str, raw)) - CONNECTOR_KEYS[kind])
    if unknown:
        raise fail(
            f"{where}.{unknown[0]}",
            f"unknown key for kind {kind!r} (it takes: {', '.join(sorted(CONNECTOR_KEYS[kind]))})",
        )
    policy = _choice(fail, f"{where}.failure_policy", raw.get("failure_policy", "fail"), POLICIES)
    if kind == "static":
        return ConnectorSpec(kind, _choice(fail, f"{where}.load", raw.get("load", "async"), LOADS), policy)
    # vLLM's OffloadingConnector: it loads asynchronously whatever its CPU tier holds.
    if "cpu_blocks" not in raw:
        raise fail(f"{where}.cpu_blocks", 'kind = "offloading" needs cpu_blocks = N (the CPU tier\'s size in blocks)')
    cpu_blocks = _count(fail, f"{where}.cpu_blocks", raw["cpu_blocks"], 1, MAX_CPU_BLOCKS)
    return ConnectorSpec(kind, "async", policy, cpu_blocks)


def parse_external(
    fail: Fail,
    label: str,
    raw: Mapping[str, Any],
    connector: ConnectorSpec | None,
    num_prompt: int,
    num_tokens: int,
    block_size: int,
    prompt_logprobs: bool,
) -> ExternalSpec | None:
    """An engine-step `arrive`'s external keys (None when it gives none)."""
    given = [k for k in ARRIVE_KEYS if k in raw]
    if not given:
        return None
    if connector is None:
        raise fail(f"{label}: {given[0]}", "needs a KV connector: set engine.kv_connector")
    if connector.kind != "static":
        raise fail(f"{label}: {given[0]}", 'only kind = "static" takes it (offloading stores what the engine computes)')
    tokens = raw.get("external_tokens", 0)
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
        raise fail(f"{label}: external_tokens", f"expected an integer >= 0, got {tokens!r}")
    if tokens > num_prompt:
        raise fail(f"{label}: external_tokens", f"{tokens} is beyond the {num_prompt}-token prompt")
    load = _choice(fail, f"{label}: external_load", raw.get("external_load", connector.load), LOADS)
    if load == "sync" and tokens == num_prompt and not prompt_logprobs:
        raise fail(
            f"{label}: external_tokens",
            "a sync load of the whole prompt leaves no token to compute (vLLM asserts): "
            "hold fewer tokens or load async",
        )
    steps = 1
    if "load_steps" in raw:
        if load != "async":
            raise fail(f"{label}: load_steps", "only an async load takes steps")
        steps = _count(fail, f"{label}: load_steps", raw["load_steps"], 1, MAX_LOAD_STEPS)
    invalid: tuple[int, ...] = ()
    if "invalid_external_blocks" in raw:
        value = raw["invalid_external_blocks"]
        num_blocks = -(-num_tokens // block_size)
        if not isinstance(value, list) or not value:
            raise fail(f"{label}: invalid_external_blocks", "expected a non-empty array of block indices")
        for i in value:
            if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < num_blocks:
                raise fail(
                    f"{label}: invalid_external_blocks",
                    f"{i!r} is outside the request: its block table has indices 0..{num_blocks - 1}",
                )
        if len(set(value)) != len(value):
            raise fail(f"{label}: invalid_external_blocks", "an index is given twice")
        invalid = tuple(value)
    return ExternalSpec(tokens, load, steps, invalid)


class _Step(Protocol):
    @property
    def label(self) -> str: ...
    @property
    def expect(self) -> Mapping[str, Any]: ...


StepT = TypeVar("StepT", bound=_Step)


def check_expects(fail: Fail, op: StepT, connector: ConnectorSpec | None) -> StepT:
    """The external stats are reported only with a connector: expecting them without one is
    bad input."""
    if connector is None:
        wrong = [k for k in op.expect if k in EXPECT_STATS]
        if wrong:
            raise fail(f"{op.label}: expect.{wrong[0]}", "reported only with a KV connector (engine.kv_connector)")
    return op


def check_step_arrive(
    fail: Fail,
    label: str,
    raw: Mapping[str, Any],
    connector: ConnectorSpec | None,
    prompt: tuple[int, ...],
    output: tuple[int, ...],
    block_size: int,
    max_model_len: int,
    prompt_logprobs: bool,
) -> ExternalSpec | None:
    """An engine-step `arrive`'s `output` (design section 7) and external keys."""
    if not output:
        raise fail(f"{label}: output", "no tokens (max_tokens = len(output) must be at least 1)")
    if len(prompt) >= max_model_len:
        # vLLM's input processor refuses a prompt that leaves no room to generate
        # (input_processor.py:520-552); a longer output is capped at max_model_len instead.
        raise fail(
            f"{label}: prompt",
            f"{len(prompt):,} tokens, at least max_model_len = {max_model_len:,}: no room to generate",
        )
    # The request never holds more than max_model_len tokens: it finishes length-capped there.
    n = min(len(prompt) + len(output), max_model_len)
    return parse_external(fail, label, raw, connector, len(prompt), n, block_size, prompt_logprobs)
