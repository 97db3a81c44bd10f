"""Scenario files (design section 3): TOML -> a validated `Scenario` of ops.

A scenario is an engine setup plus a list of steps. Parsing checks everything that can be
checked without running the engine: types, unknown keys, token specs, lengths, LoRA paths,
image placeholders, `expect` keys (speculative decoding's: parse_spec_decode.py). Checks that
depend on the engine state (is this id live, anything left to compute) happen during replay.

Every error is a `BadInput` naming the file, the step and the field, e.g.
``lessons/03_lookup.toml: step 4 (admit B): tokens: expected a positive integer``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from explorer.core.hashing import HASH_ALGOS
from explorer.errors import BadInput, read_user_file
from explorer.scenario.budget import SizeBudget
from explorer.scenario.ops import (
    Abort,
    Admit,
    Decode,
    EngineArrive,
    EngineReset,
    Finish,
    Generate,
    Op,
    Preempt,
    Reset,
    Sample,
    StepOp,
)
from explorer.scenario.parse_arrive import LoraRegistry, parse_arrive, parse_tokens
from explorer.scenario.parse_connector import (
    ConnectorSpec,
    check_expects,
    check_step_arrive,
    parse_connector,
)
from explorer.scenario.parse_groups import (
    GROUP_KEYS,
    check_group_expects,
    hashing_engine,
    parse_groups,
    refuse_connector,
)
from explorer.scenario.parse_release import RELEASE_KEY, check_release, parse_release
from explorer.scenario.parse_spec_decode import SPEC_KEY, apply_spec_ops, parse_speculative
from explorer.scenario.parse_values import Ctx, read_bool, read_int, read_str, show
from explorer.scenario.spec import (
    CLI_LIMITS,
    ENGINE_DEFAULTS,
    EXPECT_KEYS,
    EXPECT_TYPES,
    MAX_BLOCK_SIZE,
    MAX_MODEL_LEN,
    OP_KEYS,
    OPS,
    EngineConfig,
    Limits,
    Scenario,
    value_has_kind,
)
from explorer.scenario.step_spec import SCHED_DEFAULTS, is_engine_step_scenario, kind_error, parse_sched
from explorer.toml_read import loads_toml


def _engine(ctx: Ctx, raw: Any, limits: Limits) -> EngineConfig:
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise ctx.fail("engine", "expected a table")
    extra = ("kv_connector", SPEC_KEY, RELEASE_KEY, *GROUP_KEYS)
    unknown = set(raw) - set(ENGINE_DEFAULTS) - set(SCHED_DEFAULTS) - set(extra)
    if unknown:
        known = ", ".join([*ENGINE_DEFAULTS, *SCHED_DEFAULTS, *extra])
        raise ctx.fail("engine", f"unknown key {sorted(unknown)[0]!r} (known: {known})")
    v = {**ENGINE_DEFAULTS, **raw}
    block_size = read_int(ctx, "engine.block_size", v["block_size"], 1, MAX_BLOCK_SIZE)
    num_blocks = read_int(ctx, "engine.num_blocks", v["num_blocks"], 2, limits.max_blocks)
    max_model_len = read_int(ctx, "engine.max_model_len", v["max_model_len"], 1, MAX_MODEL_LEN)
    algo = read_str(ctx, "engine.hash_algo", v["hash_algo"])
    if algo not in HASH_ALGOS:
        raise ctx.fail("engine.hash_algo", f"unknown hash algorithm {algo!r} (expected one of {', '.join(HASH_ALGOS)})")
    return EngineConfig(
        block_size=block_size,
        num_blocks=num_blocks,
        max_model_len=max_model_len,
        hash_algo=algo,
        hash_seed=read_str(ctx, "engine.hash_seed", v["hash_seed"]),
        enable_prefix_caching=read_bool(ctx, "engine.enable_prefix_caching", v["enable_prefix_caching"]),
        events=read_bool(ctx, "engine.events", v["events"]),
        int_block_hashes=read_bool(ctx, "engine.int_block_hashes", v["int_block_hashes"]),
    )


def _expect(ctx: Ctx, where: str, op: str, raw: Any) -> dict[str, Any]:
    if not isinstance(raw, Mapping):
        raise ctx.fail(f"{where}.expect", "expected a table")
    allowed = EXPECT_KEYS[op]
    for key, value in raw.items():
        if key not in allowed:
            raise ctx.fail(
                f"{where}.expect.{show(key)[1:-1]}",
                f"`{op}` does not report {show(key)} (it can expect: {', '.join(sorted(allowed))})",
            )
        kind = EXPECT_TYPES[key]
        if not value_has_kind(value, kind):
            # A TOML datetime, float or table can never equal what the op reports: refused here
            # rather than failing every replay (and it could not be written back out).
            raise ctx.fail(f"{where}.expect.{key}", f"expected {kind}, got {show(value)}")
        if kind.startswith("an array") and len(value) > 1 << 20:
            raise ctx.fail(f"{where}.expect.{key}", f"{len(value):,} items, more than can be reported")
        if isinstance(value, Mapping) and len(value) > MAX_EXPECT_TABLE:  # keyed by request id
            raise ctx.fail(
                f"{where}.expect.{key}",
                f"{len(value):,} entries, more than the {MAX_EXPECT_TABLE:,} requests a scenario can hold",
            )
    return dict(raw)


MAX_EXPECT_TABLE = CLI_LIMITS.max_arrivals  # a step's tables have an entry per request at most


def _step(
    ctx: Ctx,
    i: int,
    raw: Any,
    loras: LoraRegistry,
    budget: SizeBudget,
    engine_steps: bool = False,
    kv: ConnectorSpec | None = None,
) -> Op:
    if not isinstance(raw, Mapping):
        raise ctx.fail(f"step {i + 1}", "expected a table")
    op = raw.get("op")
    if not isinstance(op, str) or op not in OPS:
        raise ctx.fail(f"step {i + 1}", f"op: unknown op {show(op)} (expected one of {', '.join(OPS)})")
    rid = raw.get("id")
    who = "" if rid is None else " " + (rid if isinstance(rid, str) and len(rid) <= 40 else show(rid))
    label = f"step {i + 1} ({op}{who})"
    wrong_kind = kind_error(op, set(raw), engine_steps)
    if wrong_kind is not None:
        raise ctx.fail(f"{label}: {wrong_kind[0]}", wrong_kind[1])
    unknown = set(raw) - OP_KEYS[op] - {"op", "note", "expect"}
    if unknown:
        raise ctx.fail(
            label,
            f"{show(sorted(map(str, unknown))[0])}: unknown key for `{op}` (it takes: {', '.join(sorted(OP_KEYS[op]))})",
        )
    try:
        budget.take_op(op, rid if isinstance(rid, str) else None)
    except BadInput as e:
        raise ctx.fail(label, str(e)) from None
    note = read_str(ctx, f"{label}: note", raw["note"]) if "note" in raw else None
    expect = _expect(ctx, label, op, raw.get("expect", {}))
    if op == "reset":
        running = read_bool(ctx, f"{label}: running", raw.get("running", False))
        if engine_steps:
            external = read_bool(ctx, f"{label}: external", raw.get("external", False))
            return EngineReset(index=i, running=running, external=external, note=note, expect=expect)
        return Reset(index=i, running=running, note=note, expect=expect)
    if op == "step":
        return StepOp(index=i, note=note, expect=expect)
    if "id" not in raw:
        raise ctx.fail(label, "id: missing request id")
    rid = read_str(ctx, f"{label}: id", rid, allow_empty=False)
    if op == "arrive":
        arrive = parse_arrive(ctx, i, label, raw, rid, loras, budget, note, expect)
        if not engine_steps:
            return arrive
        output = parse_tokens(ctx, f"{label}: output", raw["output"], budget, "sample", rid)
        p, bs, cap = arrive.prompt, budget.engine.block_size, budget.engine.max_model_len
        ext = check_step_arrive(ctx.fail, label, raw, kv, p, output, bs, cap, arrive.prompt_logprobs)
        # kind_error refused `text` and `mm` above: the arrive carries neither
        return EngineArrive(
            index=i,
            id=rid,
            prompt=arrive.prompt,
            lora=arrive.lora,
            cache_salt=arrive.cache_salt,
            prompt_logprobs=arrive.prompt_logprobs,
            output=output,
            ext=ext,
            note=note,
            expect=expect,
        )
    if op == "admit":
        tokens = read_int(ctx, f"{label}: tokens", raw["tokens"], 1) if "tokens" in raw else None
        return Admit(index=i, id=rid, tokens=tokens, note=note, expect=expect)
    if op in ("sample", "generate"):
        if "tokens" not in raw:
            raise ctx.fail(label, "tokens: missing (a token spec string or an array of ints)")
        if isinstance(raw["tokens"], int):
            raise ctx.fail(
                f"{label}: tokens",
                'a bare integer is ambiguous: write a token spec string like "7" or an array like [7]',
            )
        toks = parse_tokens(ctx, f"{label}: tokens", raw["tokens"], budget, op, rid)
        if not toks:
            raise ctx.fail(f"{label}: tokens", "no tokens")
        cls = Sample if op == "sample" else Generate
        return cls(index=i, id=rid, tokens=toks, note=note, expect=expect)
    return REQUEST_OPS[op](index=i, id=rid, note=note, expect=expect)


# The ops that carry nothing but the request id.
REQUEST_OPS: dict[str, type[Decode | Finish | Preempt | Abort]] = {
    "decode": Decode,
    "finish": Finish,
    "preempt": Preempt,
    "abort": Abort,
}


class StepParser:
    """Validates steps one at a time, exactly as a scenario file's steps are validated (LoRA
    ids carry over from step to step). The random scenario generator builds through it."""

    def __init__(
        self,
        source: str,
        engine: EngineConfig,
        limits: Limits = CLI_LIMITS,
        engine_steps: bool = False,
        kv: ConnectorSpec | None = None,
    ) -> None:
        self._ctx = Ctx(source)
        self._loras = LoraRegistry()
        self.budget = SizeBudget(engine, limits)
        self._engine_steps, self._kv = engine_steps, kv

    def parse(self, index: int, raw: Any) -> Op:
        return _step(self._ctx, index, raw, self._loras, self.budget, self._engine_steps, self._kv)


def parse_scenario_dict(data: Mapping[str, Any], source: str = "<scenario>", limits: Limits = CLI_LIMITS) -> Scenario:
    ctx = Ctx(source)
    if not isinstance(data, Mapping):
        raise ctx.fail("top level", "expected a table")
    unknown = set(data) - {"title", "description", "engine", "steps"}
    if unknown:
        raise ctx.fail(
            "top level", f"unknown key {show(sorted(map(str, unknown))[0])} (known: title, description, engine, steps)"
        )
    # The default title is the file's name, whose undecodable bytes (if any) become U+FFFD.
    stem = Path(source).stem.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    title = read_str(ctx, "title", data.get("title", stem))
    description = read_str(ctx, "description", data.get("description", ""))
    engine = _engine(ctx, data.get("engine"), limits)
    steps = data.get("steps", [])
    if not isinstance(steps, list):
        raise ctx.fail("steps", "expected an array of tables ([[steps]])")
    if len(steps) > limits.max_steps:
        raise ctx.fail("steps", f"{len(steps):,} steps, more than the limit {limits.max_steps:,}")
    # Tokenizing takes seconds a megabyte: every `text` is counted before the first is tokenized.
    text_chars = sum(len(s["text"]) for s in steps if isinstance(s, Mapping) and isinstance(s.get("text"), str))
    if text_chars > limits.max_text_chars:
        raise ctx.fail(
            "steps", f"the texts have {text_chars:,} characters in all, more than the limit {limits.max_text_chars:,}"
        )
    engine_steps = is_engine_step_scenario(steps)
    sched = parse_sched(ctx.fail, data.get("engine"), engine_steps, engine.max_model_len)
    kv = parse_connector(ctx.fail, data.get("engine"), engine_steps)  # design section 10
    speculative = parse_speculative(ctx.fail, data.get("engine"), sched)  # design section 9
    groups = parse_groups(ctx.fail, data.get("engine"), engine.block_size, MAX_BLOCK_SIZE)  # section 8
    vllm = parse_release(ctx.fail, data.get("engine"))  # section 15
    check_release(ctx.fail, vllm, groups)
    refuse_connector(ctx.fail, groups, kv is not None, steps)
    parser = StepParser(source, hashing_engine(engine, groups), limits, engine_steps, kv)
    ops = tuple(check_expects(ctx.fail, parser.parse(i, s), kv) for i, s in enumerate(steps))
    ops = apply_spec_ops(ctx.fail, ops, steps, speculative)
    check_group_expects(ctx.fail, ops, groups)
    raw = tuple(dict(s) for s in steps)
    return Scenario(title, engine, ops, source, description, raw, sched, kv, speculative, groups, vllm)


def parse_scenario_text(text: str, source: str = "<scenario>", limits: Limits = CLI_LIMITS) -> Scenario:
    return parse_scenario_dict(loads_toml(text, source), source, limits)


def load_scenario(path: str | Path, limits: Limits = CLI_LIMITS) -> Scenario:
    return parse_scenario_bytes(read_user_file(path, "scenario file", limits.max_file_bytes), str(path), limits)


def parse_scenario_bytes(raw: bytes, source: str, limits: Limits = CLI_LIMITS) -> Scenario:
    if len(raw) > limits.max_file_bytes:
        raise BadInput(
            f"{source}: {len(raw):,} bytes is more than the {limits.max_file_bytes:,}-byte limit for a scenario"
        )
    if b"\x00" in raw:
        raise BadInput(f"{source}: not a text file")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BadInput(f"{source}: not a UTF-8 text file") from None
    return parse_scenario_text(text, source, limits)


def with_engine(scenario: Scenario, limits: Limits = CLI_LIMITS, **changes: Any) -> Scenario:
    """The same steps under other engine settings (re-validated, under ``limits``)."""
    raw: dict[str, Any] = {
        "title": scenario.title,
        "description": scenario.description,
        "engine": {**scenario.engine_dict(), **changes},
        "steps": [dict(s) for s in scenario.raw_steps],
    }
    return parse_scenario_dict(raw, scenario.source, limits)


def with_steps(scenario: Scenario, extra_steps: Sequence[Mapping[str, Any]], limits: Limits = CLI_LIMITS) -> Scenario:
    """The scenario with more steps after its own (the playground's edits), re-validated."""
    raw: dict[str, Any] = {
        "title": scenario.title,
        "description": scenario.description,
        "engine": scenario.engine_dict(),
        "steps": [dict(s) for s in scenario.raw_steps] + [dict(s) for s in extra_steps],
    }
    return parse_scenario_dict(raw, scenario.source, limits)
