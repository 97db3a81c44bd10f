"""Reading a fleet file: TOML -> a validated `FleetConfig`; every error names the file, the
table and the key that is wrong (docs/router.md has the format)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from explorer.core.hashing import HASH_ALGOS
from explorer.errors import BadInput, read_user_file
from explorer.router.config import (
    LIMITS,
    MAX_TOML_BYTES,
    TIE_BREAKS,
    WORKLOAD_KINDS,
    FailureSpec,
    FleetConfig,
    FleetSpec,
    Limits,
    PrefillSpec,
    RouterSpec,
    SystemPrompt,
    WorkloadSpec,
)
from explorer.toml_read import loads_toml


class _Table:
    """Typed reads from one TOML table; every error names the file, the table and the key."""

    def __init__(self, source: str, name: str, raw: Any) -> None:
        if raw is None:
            raw = {}
        if not isinstance(raw, dict):
            raise BadInput(f"{source}: [{name}] must be a table, got {_tname(raw)}")
        self.source, self.name, self.raw = source, name, dict(raw)
        self.used: set[str] = set()

    def fail(self, key: str, msg: str) -> BadInput:
        return BadInput(f"{self.source}: [{self.name}] {key}: {msg}")

    def _get(self, key: str) -> Any:
        self.used.add(key)
        return self.raw.get(key, _MISSING)

    def integer(self, key: str, default: int, lo: int, hi: int) -> int:
        v = self._get(key)
        if v is _MISSING:
            return default
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            raise self.fail(key, f"expected an integer in {lo}..{hi:,}, got {_show(v)}")
        return v

    def number(self, key: str, default: float, lo: float, hi: float, lo_open: bool = False) -> float:
        v = self._get(key)
        if v is _MISSING:
            return default
        ok = not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v)
        if ok:
            ok = (lo < v if lo_open else lo <= v) and v <= hi
        if not ok:
            left = "(" if lo_open else "["
            raise self.fail(key, f"expected a number in {left}{lo:g}, {hi:g}], got {_show(v)}")
        return float(v)

    def boolean(self, key: str, default: bool) -> bool:
        v = self._get(key)
        if v is _MISSING:
            return default
        if not isinstance(v, bool):
            raise self.fail(key, f"expected true or false, got {_show(v)}")
        return v

    def string(self, key: str, default: str, choices: Sequence[str] | None = None, max_len: int = 200) -> str:
        v = self.optional_string(key, choices, max_len)
        return default if v is None else v

    def optional_string(self, key: str, choices: Sequence[str] | None = None, max_len: int = 200) -> str | None:
        v = self._get(key)
        if v is _MISSING:
            return None
        if not isinstance(v, str):
            raise self.fail(key, f"expected a string, got {_show(v)}")
        if choices is not None and v not in choices:
            raise self.fail(key, f"expected one of {', '.join(repr(c) for c in choices)}, got {v!r}")
        if len(v) > max_len:
            raise self.fail(key, f"is {len(v):,} characters long, more than {max_len:,}")
        return v

    def int_range(self, key: str, default: tuple[int, int], lo: int, hi: int) -> tuple[int, int]:
        v = self._get(key)
        if v is _MISSING:
            return default
        if isinstance(v, bool) or (isinstance(v, int) and lo <= v <= hi):
            if isinstance(v, bool):
                raise self.fail(key, f"expected [min, max] or an integer, got {_show(v)}")
            return (v, v)
        if (
            not isinstance(v, list)
            or len(v) != 2
            or any(isinstance(x, bool) or not isinstance(x, int) or not lo <= x <= hi for x in v)
            or v[0] > v[1]
        ):
            raise self.fail(key, f"expected [min, max] with {lo} <= min <= max <= {hi:,}, got {_show(v)}")
        return (v[0], v[1])

    def done(self) -> None:
        unknown = sorted(set(self.raw) - self.used)
        if unknown:
            raise self.fail(unknown[0], "unknown key (a typo?)")


_MISSING = object()


def _tname(v: Any) -> str:
    return {dict: "a table", list: "an array", str: "a string", bool: "a boolean"}.get(type(v), type(v).__name__)


def _show(v: Any) -> str:
    try:
        text = json.dumps(v)
    except (TypeError, ValueError):
        text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


_TOP_KEYS = {"title", "description", "fleet", "router", "workload", "failures", "prefill"}


def parse_fleet_dict(data: Mapping[str, Any], source: str = "<fleet>", limits: Limits = LIMITS) -> FleetConfig:
    """A validated `FleetConfig` from parsed TOML; `BadInput` names the field that is wrong."""
    if not isinstance(data, Mapping):
        raise BadInput(f"{source}: a fleet file is a TOML document with tables")
    for k in data:
        if k not in _TOP_KEYS:
            raise BadInput(f"{source}: {k}: unknown top-level key (expected {', '.join(sorted(_TOP_KEYS))})")
    title = data.get("title", "Fleet")
    if not isinstance(title, str) or len(title) > 200:
        raise BadInput(f"{source}: title: expected a string of at most 200 characters")
    description = data.get("description", "")
    if not isinstance(description, str) or len(description) > 4000:
        raise BadInput(f"{source}: description: expected a string of at most 4,000 characters")

    t = _Table(source, "fleet", data.get("fleet"))
    fleet = FleetSpec(
        instances=t.integer("instances", 4, 1, limits.max_instances),
        block_size=t.integer("block_size", 16, 1, limits.max_block_size),
        num_blocks=t.integer("num_blocks", 1000, 2, limits.max_num_blocks),
        hash_algo=t.string("hash_algo", "sha256", HASH_ALGOS),
        hash_seed=t.string("hash_seed", "", max_len=128),
        int_block_hashes=t.boolean("int_block_hashes", True),
    )
    t.done()
    if fleet.instances * fleet.num_blocks > limits.max_total_blocks:
        raise BadInput(
            f"{source}: [fleet] num_blocks: {fleet.instances} instances x {fleet.num_blocks:,} blocks is more than "
            f"{limits.max_total_blocks:,} blocks in all"
        )

    t = _Table(source, "router", data.get("router"))
    router = RouterSpec(
        load_weight=t.number("load_weight", 8.0, 0.0, 1000.0),
        tie_break=t.string("tie_break", "least_loaded", TIE_BREAKS),
    )
    t.done()

    t = _Table(source, "workload", data.get("workload"))
    kind = t.string("kind", "chat", WORKLOAD_KINDS)
    prompts = _system_prompts(source, t, limits)
    n_prompts = t.integer("system_prompts", len(prompts) or 6, 1, limits.max_system_prompts)
    if prompts and n_prompts != len(prompts):
        raise t.fail("system_prompts", f"is {n_prompts} but {len(prompts)} [[workload.system_prompt]] tables are given")
    workload = WorkloadSpec(
        kind=kind,
        seed=t.integer("seed", 7, 0, 2**31 - 1),
        requests=t.integer("requests", 200, 1, limits.max_requests),
        tenants=t.integer("tenants", 2, 1, limits.max_tenants),
        system_prompts=n_prompts,
        system_prompt_tokens=t.int_range("system_prompt_tokens", (300, 1000), 1, limits.max_prompt_tokens),
        user_tokens=t.int_range("user_tokens", (30, 300), 1, limits.max_piece_tokens),
        output_tokens=t.int_range("output_tokens", (30, 200), 0, limits.max_piece_tokens),
        turns=t.int_range("turns", (3, 10), 1, limits.max_turns),
        session_gap_ms=t.number("session_gap_ms", 150.0, 0.0, 1e7, lo_open=True),
        think_ms=t.number("think_ms", 1500.0, 0.0, 1e8),
        decode_ms=t.number("decode_ms", 20.0, 0.0, 1e4),
        prompts=prompts,
        trace=t.string("trace", "shipped", ("shipped", "upload")),
        trace_outputs=t.boolean("trace_outputs", False),
    )
    t.done()

    t = _Table(source, "failures", data.get("failures"))
    algo = t.string("router_hash_algo", "", ("",) + HASH_ALGOS)
    failures = FailureSpec(
        router_hash_algo=algo or "",
        router_hash_seed=t.optional_string("router_hash_seed", max_len=128),
        router_block_size=t.integer("router_block_size", 0, 0, limits.max_block_size),
        router_wrong_hash_form=t.boolean("router_wrong_hash_form", False),
        xxhash_unshared_seed=t.boolean("xxhash_unshared_seed", False),
        tenant_salt=t.boolean("tenant_salt", False),
        router_ignores_salt=t.boolean("router_ignores_salt", False),
        drop_batches=t.number("drop_batches", 0.0, 0.0, 0.95),
        drop_seed=t.integer("drop_seed", 1, 0, 2**31 - 1),
    )
    t.done()
    if failures.router_ignores_salt and not failures.tenant_salt:
        raise t.fail("router_ignores_salt", "needs tenant_salt = true (without a salt there is nothing to ignore)")

    t = _Table(source, "prefill", data.get("prefill"))
    prefill = PrefillSpec(
        params=t.number("params", 8.03e9, 0.0, 1e13, lo_open=True),
        peak_tflops=t.number("peak_tflops", 989.0, 0.0, 1e6, lo_open=True),
        utilization=t.number("utilization", 0.5, 0.0, 1.0, lo_open=True),
        attention=t.boolean("attention", False),
    )
    t.done()
    return FleetConfig(title, description, fleet, router, workload, failures, prefill, source)


def _system_prompts(source: str, t: _Table, limits: Limits) -> tuple[SystemPrompt, ...]:
    raw = t._get("system_prompt")
    if raw is _MISSING:
        return ()
    if not isinstance(raw, list) or not raw:
        raise t.fail("system_prompt", "expected [[workload.system_prompt]] tables, each with text or prompt")
    if len(raw) > limits.max_system_prompts:
        raise t.fail("system_prompt", f"{len(raw)} prompts is more than {limits.max_system_prompts}")
    out = []
    for i, item in enumerate(raw):
        where = f"system_prompt[{i}]"
        if not isinstance(item, dict):
            raise t.fail(where, f"expected a table, got {_tname(item)}")
        extra = set(item) - {"text", "prompt"}
        if extra:
            raise t.fail(f"{where}.{sorted(extra)[0]}", "unknown key (expected text or prompt)")
        if ("text" in item) == ("prompt" in item):
            raise t.fail(
                where, "give exactly one of text (tokenized with SmolLM2's tokenizer) or prompt (a token spec)"
            )
        if "text" in item:
            text = item["text"]
            if not isinstance(text, str) or not text:
                raise t.fail(f"{where}.text", "expected a non-empty string")
            if len(text) > 20 * limits.max_prompt_tokens:
                raise t.fail(f"{where}.text", f"is {len(text):,} characters long, too long for a system prompt")
            out.append(SystemPrompt(text=text))
        else:
            p = item["prompt"]
            try:
                if isinstance(p, str):
                    from explorer.tokens import spec_length

                    n = spec_length(p)
                    if n > limits.max_prompt_tokens:
                        raise BadInput(f"expands to {n:,} tokens, more than {limits.max_prompt_tokens:,}")
                    if n == 0:
                        raise BadInput("is empty")
                    out.append(SystemPrompt(prompt=p))
                else:
                    from explorer.tokens import parse_token_list

                    ids = parse_token_list(p, "prompt", limits.max_prompt_tokens)
                    if not ids:
                        raise BadInput("is empty")
                    out.append(SystemPrompt(prompt=tuple(ids)))
            except BadInput as e:
                raise t.fail(f"{where}.prompt", str(e)) from None
    return tuple(out)


def parse_fleet_text(text: str, source: str = "<fleet>", limits: Limits = LIMITS) -> FleetConfig:
    if len(text.encode("utf-8", "surrogatepass")) > MAX_TOML_BYTES:
        raise BadInput(f"{source}: more than {MAX_TOML_BYTES:,} bytes; a fleet file is small")
    return parse_fleet_dict(loads_toml(text, source), source, limits)


def load_fleet(path: str | Path, limits: Limits = LIMITS) -> FleetConfig:
    p = Path(path)
    raw = read_user_file(p, "fleet file", MAX_TOML_BYTES)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BadInput(f"{p.name}: not UTF-8 text") from None
    return parse_fleet_text(text, p.name, limits)


def fleets_dir() -> Path:
    return Path(__file__).resolve().parents[2] / "fleets"


def example_fleets() -> dict[str, Path]:
    """The shipped fleet files, by file stem, in name order."""
    d = fleets_dir()
    return {p.stem: p for p in sorted(d.glob("*.toml"))} if d.is_dir() else {}
