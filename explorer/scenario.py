"""Scenario files (design section 3): TOML -> a validated `Scenario` of ops.

A scenario is an engine setup plus a list of steps (`arrive`, `admit`, `sample`, `decode`,
`generate`, `finish`, `preempt`, `reset`). Parsing checks everything that can be checked
without running the engine: types, unknown keys, token specs, lengths, LoRA paths, image
placeholders, `expect` keys. Checks that depend on the engine state (is this id live, is
there anything left to compute) happen during replay, in `explorer.trace`.

Every error is a `BadInput` naming the file, the step and the field, e.g.
``lessons/03_lookup.toml: step 4 (admit B): tokens: expected a positive integer``.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from explorer.core.hashing import HASH_ALGOS, resolve_none_hash_seed
from explorer.errors import BadInput, read_user_file
from explorer.tokens import parse_token_list, spec_length

OPS = ("arrive", "admit", "sample", "decode", "generate", "finish", "preempt", "reset")

ENGINE_DEFAULTS: dict[str, Any] = {
    "block_size": 16,
    "num_blocks": 300,
    "max_model_len": 1048576,
    "hash_algo": "sha256",
    "hash_seed": "",
    "enable_prefix_caching": True,
    "events": True,
    "int_block_hashes": True,
}

# Keys each op accepts besides `op`, `note` and `expect`.
OP_KEYS: dict[str, frozenset[str]] = {
    "arrive": frozenset({"id", "prompt", "text", "lora", "lora_path", "cache_salt", "mm", "prompt_logprobs"}),
    "admit": frozenset({"id", "tokens"}),
    "sample": frozenset({"id", "tokens"}),
    "decode": frozenset({"id"}),
    "generate": frozenset({"id", "tokens"}),
    "finish": frozenset({"id"}),
    "preempt": frozenset({"id"}),
    "reset": frozenset({"running"}),
}

_STATS_KEYS = (
    "stats_requests",
    "stats_queries",
    "stats_hits",
    "stats_preempted_requests",
    "stats_preempted_queries",
    "stats_preempted_hits",
)
_COMMON_EXPECT = frozenset({"ok", "num_free_blocks", "free_queue", "event_types", *_STATS_KEYS})
# `expect` keys per op: a key for a field the op does not report is bad input.
EXPECT_KEYS: dict[str, frozenset[str]] = {
    op: _COMMON_EXPECT
    | ({"hit_tokens"} if op == "admit" else set())
    | ({"new_block_ids"} if op in ("admit", "decode", "generate") else set())
    for op in OPS
}


@dataclass(frozen=True)
class Limits:
    """Caps for untrusted scenarios (the web app); the CLI uses the generous defaults."""

    max_prompt_tokens: int = 1 << 22
    max_total_tokens: int = 1 << 24
    max_steps: int = 100_000
    max_blocks: int = 1 << 22


CLI_LIMITS = Limits()


@dataclass(frozen=True)
class EngineConfig:
    block_size: int = 16
    num_blocks: int = 300
    max_model_len: int = 1048576
    hash_algo: str = "sha256"
    hash_seed: str = ""  # "" = vLLM's default (PYTHONHASHSEED unset)
    enable_prefix_caching: bool = True
    events: bool = True
    int_block_hashes: bool = True

    def resolve_seed(self) -> str | None:
        """The seed string NONE_HASH will be hashed from (draws one for xxhash without a seed);
        None when prefix caching is off, because vLLM then builds no hasher at all."""
        if not self.enable_prefix_caching:
            return None
        return resolve_none_hash_seed(self.hash_algo, self.hash_seed or None)

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ENGINE_DEFAULTS}


@dataclass(frozen=True)
class LoraSpec:
    name: str
    id: int  # 1, 2, ... in order of first appearance in the scenario
    path: str


@dataclass(frozen=True)
class MMSpec:
    id: str
    offset: int
    length: int


@dataclass(frozen=True)
class Op:
    """One step of a scenario, validated, with token specs expanded."""

    index: int  # 0-based position in the scenario
    op: str
    id: str | None = None
    prompt: tuple[int, ...] = ()
    text: str | None = None
    lora: LoraSpec | None = None
    cache_salt: str | None = None
    mm: tuple[MMSpec, ...] = ()
    prompt_logprobs: bool = False
    tokens: int | tuple[int, ...] | None = None  # admit: a count; sample/generate: token ids
    running: bool = False
    note: str | None = None
    expect: Mapping[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """How messages name this step: 1-based number, op and id."""
        who = f" {self.id}" if self.id is not None else ""
        return f"step {self.index + 1} ({self.op}{who})"

    def normalized(self) -> dict[str, Any]:
        """The JSON form the conformance oracle reads (every spec already expanded)."""
        d: dict[str, Any] = {"op": self.op}
        if self.op == "reset":
            d["running"] = self.running
            return d
        d["id"] = self.id
        if self.op == "arrive":
            d["prompt"] = list(self.prompt)
            d["lora"] = (
                None if self.lora is None else {"name": self.lora.name, "id": self.lora.id, "path": self.lora.path}
            )
            d["cache_salt"] = self.cache_salt
            d["mm"] = [{"id": m.id, "offset": m.offset, "length": m.length} for m in self.mm]
            d["prompt_logprobs"] = self.prompt_logprobs
        elif self.op == "admit":
            d["tokens"] = self.tokens
        elif self.op in ("sample", "generate"):
            d["tokens"] = list(self.tokens or ())
        return d


@dataclass(frozen=True)
class Scenario:
    title: str
    engine: EngineConfig
    ops: tuple[Op, ...]
    source: str = "<scenario>"
    description: str = ""
    # The TOML tables as read, so a session can be written back out (`to_toml`).
    raw_steps: tuple[Mapping[str, Any], ...] = ()

    def normalized(self, hash_seed: str | None) -> dict[str, Any]:
        engine = self.engine.as_dict()
        engine["hash_seed"] = hash_seed
        return {"engine": engine, "ops": [op.normalized() for op in self.ops]}

    def with_engine(self, **changes: Any) -> Scenario:
        """The same steps under other engine settings (re-validated)."""
        raw = {"title": self.title, "description": self.description, "engine": {**self.engine.as_dict(), **changes}}
        raw["steps"] = [dict(s) for s in self.raw_steps]
        return parse_scenario_dict(raw, self.source)

    def with_steps(self, extra_steps: Sequence[Mapping[str, Any]], limits: Limits = CLI_LIMITS) -> Scenario:
        raw = {"title": self.title, "description": self.description, "engine": self.engine.as_dict()}
        raw["steps"] = [dict(s) for s in self.raw_steps] + [dict(s) for s in extra_steps]
        return parse_scenario_dict(raw, self.source, limits)

    def to_toml(self) -> str:
        from explorer.toml_write import dumps_scenario

        return dumps_scenario(self.title, self.description, self.engine.as_dict(), self.raw_steps)


# ---- parsing ----------------------------------------------------------------------------------


class _Ctx:
    """Error messages that name the file, the step and the field."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, where: str, msg: str) -> BadInput:
        return BadInput(f"{self.source}: {where}: {msg}")


def _int(ctx: _Ctx, where: str, value: Any, lo: int, hi: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ctx.fail(where, f"expected an integer, got {value!r}")
    if value < lo or (hi is not None and value > hi):
        rng = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
        raise ctx.fail(where, f"{value} is out of range: expected an integer {rng}")
    return value


def _bool(ctx: _Ctx, where: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ctx.fail(where, f"expected true or false, got {value!r}")
    return value


def _str(ctx: _Ctx, where: str, value: Any, allow_empty: bool = True) -> str:
    if not isinstance(value, str):
        raise ctx.fail(where, f"expected a string, got {value!r}")
    if not allow_empty and not value:
        raise ctx.fail(where, "must not be empty")
    return value


def _engine(ctx: _Ctx, raw: Any, limits: Limits) -> EngineConfig:
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise ctx.fail("engine", "expected a table")
    unknown = set(raw) - set(ENGINE_DEFAULTS)
    if unknown:
        raise ctx.fail("engine", f"unknown key {sorted(unknown)[0]!r} (known: {', '.join(ENGINE_DEFAULTS)})")
    v = {**ENGINE_DEFAULTS, **raw}
    block_size = _int(ctx, "engine.block_size", v["block_size"], 1, 1 << 16)
    num_blocks = _int(ctx, "engine.num_blocks", v["num_blocks"], 2, limits.max_blocks)
    max_model_len = _int(ctx, "engine.max_model_len", v["max_model_len"], 1)
    algo = _str(ctx, "engine.hash_algo", v["hash_algo"])
    if algo not in HASH_ALGOS:
        raise ctx.fail("engine.hash_algo", f"unknown hash algorithm {algo!r} (expected one of {', '.join(HASH_ALGOS)})")
    return EngineConfig(
        block_size=block_size,
        num_blocks=num_blocks,
        max_model_len=max_model_len,
        hash_algo=algo,
        hash_seed=_str(ctx, "engine.hash_seed", v["hash_seed"]),
        enable_prefix_caching=_bool(ctx, "engine.enable_prefix_caching", v["enable_prefix_caching"]),
        events=_bool(ctx, "engine.events", v["events"]),
        int_block_hashes=_bool(ctx, "engine.int_block_hashes", v["int_block_hashes"]),
    )


def _tokens(ctx: _Ctx, where: str, value: Any, cap: int, cap_name: str) -> tuple[int, ...]:
    """A token spec or int array, its length checked against ``cap`` before expansion."""
    try:
        if isinstance(value, str):
            n = spec_length(value)
            if n > cap:
                raise BadInput(f"expands to {n:,} tokens, more than {cap_name} = {cap:,}")
        return tuple(parse_token_list(value, "tokens", max_tokens=cap))
    except BadInput as e:
        raise ctx.fail(where, str(e)) from None


class _LoraRegistry:
    """LoRA ids 1, 2, ... in order of first appearance; one path per name."""

    def __init__(self) -> None:
        self.by_name: dict[str, LoraSpec] = {}

    def get(self, ctx: _Ctx, where: str, name: str, path: str | None) -> LoraSpec:
        path = f"loras/{name}" if path is None else path
        if not path:
            raise ctx.fail(f"{where}.lora_path", "must not be empty (vLLM refuses an empty LoRA path)")
        known = self.by_name.get(name)
        if known is None:
            known = self.by_name[name] = LoraSpec(name, len(self.by_name) + 1, path)
        elif known.path != path:
            raise ctx.fail(f"{where}.lora_path", f"LoRA {name!r} already has path {known.path!r} in this scenario")
        return known


def _mm(ctx: _Ctx, where: str, raw: Any, num_prompt: int) -> tuple[MMSpec, ...]:
    if not isinstance(raw, list):
        raise ctx.fail(f"{where}.mm", "expected an array of tables {id, offset, length}")
    items = []
    for i, item in enumerate(raw):
        w = f"{where}.mm[{i}]"
        if not isinstance(item, Mapping):
            raise ctx.fail(w, "expected a table {id, offset, length}")
        unknown = set(item) - {"id", "offset", "length"}
        if unknown or not {"id", "offset", "length"} <= set(item):
            raise ctx.fail(w, "expected exactly the keys id, offset and length")
        items.append(
            MMSpec(
                _str(ctx, f"{w}.id", item["id"], allow_empty=False),
                _int(ctx, f"{w}.offset", item["offset"], 0),
                _int(ctx, f"{w}.length", item["length"], 1),
            )
        )
    items.sort(key=lambda m: m.offset)
    prev_end = 0
    for m in items:
        if m.offset + m.length > num_prompt:
            raise ctx.fail(
                f"{where}.mm",
                f"image {m.id!r} covers tokens [{m.offset}, {m.offset + m.length}), outside the {num_prompt}-token prompt",
            )
        if m.offset < prev_end:
            raise ctx.fail(f"{where}.mm", f"image {m.id!r} at offset {m.offset} overlaps the previous image")
        prev_end = m.offset + m.length
    return tuple(items)


def _expect(ctx: _Ctx, where: str, op: str, raw: Any) -> dict[str, Any]:
    if not isinstance(raw, Mapping):
        raise ctx.fail(f"{where}.expect", "expected a table")
    allowed = EXPECT_KEYS[op]
    for key in raw:
        if key not in allowed:
            raise ctx.fail(
                f"{where}.expect.{key}", f"`{op}` does not report {key!r} (it can expect: {', '.join(sorted(allowed))})"
            )
    return dict(raw)


def _step(ctx: _Ctx, i: int, raw: Any, engine: EngineConfig, loras: _LoraRegistry, limits: Limits) -> Op:
    if not isinstance(raw, Mapping):
        raise ctx.fail(f"step {i + 1}", "expected a table")
    op = raw.get("op")
    if op not in OPS:
        raise ctx.fail(f"step {i + 1}", f"op: unknown op {op!r} (expected one of {', '.join(OPS)})")
    rid = raw.get("id")
    label = f"step {i + 1} ({op}{'' if rid is None else ' ' + str(rid)})"
    unknown = set(raw) - OP_KEYS[op] - {"op", "note", "expect"}
    if unknown:
        raise ctx.fail(
            label, f"{sorted(unknown)[0]}: unknown key for `{op}` (it takes: {', '.join(sorted(OP_KEYS[op]))})"
        )
    note = _str(ctx, f"{label}: note", raw["note"]) if "note" in raw else None
    expect = _expect(ctx, label, op, raw.get("expect", {}))
    if op == "reset":
        return Op(i, op, running=_bool(ctx, f"{label}: running", raw.get("running", False)), note=note, expect=expect)
    if "id" not in raw:
        raise ctx.fail(label, "id: missing request id")
    rid = _str(ctx, f"{label}: id", rid, allow_empty=False)
    if op == "arrive":
        return _arrive(ctx, i, label, raw, rid, engine, loras, limits, note, expect)
    if op == "admit":
        tokens = _int(ctx, f"{label}: tokens", raw["tokens"], 1) if "tokens" in raw else None
        return Op(i, op, rid, tokens=tokens, note=note, expect=expect)
    if op in ("sample", "generate"):
        if "tokens" not in raw:
            raise ctx.fail(label, "tokens: missing (a token spec string or an array of ints)")
        if isinstance(raw["tokens"], int):
            raise ctx.fail(
                f"{label}: tokens",
                'a bare integer is ambiguous: write a token spec string like "7" or an array like [7]',
            )
        toks = _tokens(ctx, f"{label}: tokens", raw["tokens"], engine.max_model_len, "max_model_len")
        if not toks:
            raise ctx.fail(f"{label}: tokens", "no tokens")
        return Op(i, op, rid, tokens=toks, note=note, expect=expect)
    return Op(i, op, rid, note=note, expect=expect)


def _arrive(ctx, i, label, raw, rid, engine, loras, limits, note, expect) -> Op:
    cap = min(engine.max_model_len, limits.max_prompt_tokens)
    cap_name = "max_model_len" if cap == engine.max_model_len else "the prompt limit"
    has_prompt, has_text = "prompt" in raw, "text" in raw
    if has_prompt == has_text:
        raise ctx.fail(label, "prompt: give exactly one of `prompt` (token spec or ints) and `text`")
    text = None
    if has_prompt:
        prompt = _tokens(ctx, f"{label}: prompt", raw["prompt"], cap, cap_name)
    else:
        text = _str(ctx, f"{label}: text", raw["text"])
        try:
            from explorer.tokens import encode_text

            prompt = tuple(encode_text(text))
        except BadInput as e:
            raise ctx.fail(f"{label}: text", str(e)) from None
        if len(prompt) > cap:
            raise ctx.fail(f"{label}: text", f"tokenizes to {len(prompt):,} tokens, more than {cap_name} = {cap:,}")
    if not prompt:
        raise ctx.fail(f"{label}: prompt", "empty prompt (vLLM refuses it too)")
    lora = None
    if "lora" in raw:
        name = _str(ctx, f"{label}: lora", raw["lora"], allow_empty=False)
        path = _str(ctx, f"{label}: lora_path", raw["lora_path"]) if "lora_path" in raw else None
        lora = loras.get(ctx, label + ": lora", name, path)
    elif "lora_path" in raw:
        raise ctx.fail(f"{label}: lora_path", "needs `lora` (the adapter name)")
    salt = _str(ctx, f"{label}: cache_salt", raw["cache_salt"]) if "cache_salt" in raw else None
    mm = _mm(ctx, label, raw["mm"], len(prompt)) if "mm" in raw else ()
    logprobs = _bool(ctx, f"{label}: prompt_logprobs", raw.get("prompt_logprobs", False))
    return Op(
        i,
        "arrive",
        rid,
        prompt=prompt,
        text=text,
        lora=lora,
        cache_salt=salt,
        mm=mm,
        prompt_logprobs=logprobs,
        note=note,
        expect=expect,
    )


def parse_scenario_dict(data: Mapping[str, Any], source: str = "<scenario>", limits: Limits = CLI_LIMITS) -> Scenario:
    ctx = _Ctx(source)
    if not isinstance(data, Mapping):
        raise ctx.fail("top level", "expected a table")
    unknown = set(data) - {"title", "description", "engine", "steps"}
    if unknown:
        raise ctx.fail("top level", f"unknown key {sorted(unknown)[0]!r} (known: title, description, engine, steps)")
    title = _str(ctx, "title", data.get("title", Path(source).stem))
    description = _str(ctx, "description", data.get("description", ""))
    engine = _engine(ctx, data.get("engine"), limits)
    steps = data.get("steps", [])
    if not isinstance(steps, list):
        raise ctx.fail("steps", "expected an array of tables ([[steps]])")
    if len(steps) > limits.max_steps:
        raise ctx.fail("steps", f"{len(steps):,} steps, more than the limit {limits.max_steps:,}")
    loras = _LoraRegistry()
    ops = tuple(_step(ctx, i, s, engine, loras, limits) for i, s in enumerate(steps))
    total = sum(len(o.prompt) + (len(o.tokens) if isinstance(o.tokens, tuple) else 0) for o in ops)
    if total > limits.max_total_tokens:
        raise ctx.fail("steps", f"{total:,} tokens in all, more than the limit {limits.max_total_tokens:,}")
    return Scenario(title, engine, ops, source, description, tuple(dict(s) for s in steps))


def parse_scenario_text(text: str, source: str = "<scenario>", limits: Limits = CLI_LIMITS) -> Scenario:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise BadInput(f"{source}: not valid TOML: {e}") from None
    return parse_scenario_dict(data, source, limits)


def load_scenario(path: str | Path, limits: Limits = CLI_LIMITS) -> Scenario:
    return parse_scenario_bytes(read_user_file(path, "scenario file"), str(path), limits)


def parse_scenario_bytes(raw: bytes, source: str, limits: Limits = CLI_LIMITS) -> Scenario:
    if b"\x00" in raw:
        raise BadInput(f"{source}: not a text file")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BadInput(f"{source}: not a UTF-8 text file") from None
    return parse_scenario_text(text, source, limits)


def replace_engine_seed(scenario: Scenario, seed: str) -> Scenario:
    """The scenario with an explicit hash seed (keeps a drawn xxhash seed across reruns)."""
    return replace(scenario, engine=replace(scenario.engine, hash_seed=seed))


def replay(scenario: Scenario, **kwargs: Any):
    """Replay a scenario into a `Trace` (see explorer.trace.replay)."""
    from explorer.trace import replay as _replay

    return _replay(scenario, **kwargs)
