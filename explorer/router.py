"""A prefix-aware router over a simulated fleet: what KV events buy, and how it breaks.

Several instances, each its own engine (`ScenarioEngine`: a `KVCacheManager` with events on),
serve one request stream. After every engine step an instance's queued events become one batch
(``encode_batch``: vLLM's msgpack payload) with the instance's own sequence number, and the
frames go through the same subscriber state machine as the live page
(`explorer.events_zmq.KVEventStream`, no sockets). The router never looks inside an engine: it
tokenizes the request, hashes it with its own `HashContext` and request block hasher, converts
its hashes to the form the events carry (the low 64 bits as ints by default), and reads, per
instance, the multiset of block hashes the subscriber rebuilt from the events.

Policies, all run on the same stream with fresh engines:

- ``prefix``: for every instance ``cost = blocks to prefill + load_weight x requests in
  flight``, where the blocks to prefill are the prompt's full blocks (capped, like vLLM's
  lookup, so the last token always runs) minus the longest run of the router's hashes that the
  instance is known to hold. Lowest cost wins; ``tie_break`` settles ties.
- ``round_robin``: instance ``k mod n`` for the k-th routed request.
- ``least_loaded``: fewest requests in flight (then the lowest index).

The time model is deliberately simple and the same for every policy: requests arrive at their
times; a routed request joins its instance's FIFO queue and is admitted (lookup + allocate_slots
for the whole prompt) as soon as its whole footprint fits; its output is then computed in one
engine step (``sample`` all but the last output token, ``decode``, ``sample`` the last; the
pool ends exactly as after token-by-token decoding, with fewer, larger events) and it finishes
``len(output) x decode_ms`` later, when its blocks are freed. A request that could not fit even
in an empty instance is skipped before routing.

The failure switches (`FailureSpec`) each break one link of that chain; `explain` turns the
numbers of a run into one sentence per switch.

Nothing here imports Streamlit or plotly; nothing is module-global and mutable.
"""

from __future__ import annotations

import base64
import binascii
import heapq
import json
import math
import random
import time
import tomllib
import zlib
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from explorer.core.events import BlockStored, KVEventBatch, encode_batch
from explorer.core.hashing import (
    HASH_ALGOS,
    NON_CRYPTO_HASH_ALGOS,
    BlockHash,
    HashContext,
    external_block_hash,
    get_block_hash,
    init_none_hash,
)
from explorer.core.kv_cache_utils import get_request_block_hasher
from explorer.core.request import Request
from explorer.errors import BadInput, read_user_file
from explorer.events_zmq import KVEventStream, live_frames
from explorer.prefill.configs import LLAMA3_8B_SHAPE
from explorer.prefill.estimate import estimate_prefill
from explorer.scenario import EngineConfig, Op, Scenario
from explorer.toml_write import toml_value
from explorer.trace import ScenarioEngine

POLICIES = ("prefix", "round_robin", "least_loaded")
POLICY_LABELS = {"prefix": "prefix-aware", "round_robin": "round robin", "least_loaded": "least loaded"}
BASELINE = "prefix_healthy"  # the prefix policy with every failure switch off
TIE_BREAKS = ("least_loaded", "lowest_index", "round_robin", "random")
WORKLOAD_KINDS = ("chat", "trace")
HASH_FORMS = ("int64", "digest")

VOCAB_SIZE = 49152  # SmolLM2's vocabulary: random chat tokens are drawn below it
MAX_MODEL_LEN = 1 << 20
MAX_TOML_BYTES = 64 << 10  # a fleet file (and a decompressed share link)
MAX_SHARE_CHARS = 6000  # the longest share link payload we write or read
MAX_STREAM_TOKENS = 8_000_000  # prompt tokens of a whole stream
SHARE_PREFIX = "v1."


# ---- configuration ------------------------------------------------------------------------------


@dataclass(frozen=True)
class FleetSpec:
    instances: int = 4
    block_size: int = 16
    num_blocks: int = 1000  # per instance; block 0 is the null block
    hash_algo: str = "sha256"
    hash_seed: str = ""  # "" = vLLM's default (PYTHONHASHSEED unset): xxhash then draws per instance
    int_block_hashes: bool = True  # VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES


@dataclass(frozen=True)
class RouterSpec:
    load_weight: float = 8.0  # blocks of prefill one request in flight is worth
    tie_break: str = "least_loaded"


@dataclass(frozen=True)
class SystemPrompt:
    text: str | None = None
    prompt: str | tuple[int, ...] | None = None  # a token spec or token ids

    def as_toml(self) -> dict[str, Any]:
        if self.text is not None:
            return {"text": self.text}
        return {"prompt": self.prompt if isinstance(self.prompt, str) else list(self.prompt or ())}


@dataclass(frozen=True)
class WorkloadSpec:
    kind: str = "chat"
    seed: int = 7
    requests: int = 200
    tenants: int = 2
    system_prompts: int = 6
    system_prompt_tokens: tuple[int, int] = (300, 1000)
    user_tokens: tuple[int, int] = (30, 300)
    output_tokens: tuple[int, int] = (30, 200)
    turns: tuple[int, int] = (3, 10)
    session_gap_ms: float = 150.0  # mean gap between new chat sessions
    think_ms: float = 1500.0  # mean gap between a reply and the next turn
    decode_ms: float = 20.0  # per output token: how long a request stays in flight
    prompts: tuple[SystemPrompt, ...] = ()  # explicit system prompts (text or token spec)
    trace: str = "shipped"  # kind = "trace": the shipped Mooncake trace or an uploaded one
    trace_outputs: bool = False  # trace: generate output_length tokens of 0


@dataclass(frozen=True)
class FailureSpec:
    router_hash_algo: str = ""  # "" = the fleet's
    router_hash_seed: str | None = None  # None = the fleet's; a string plays PYTHONHASHSEED
    router_block_size: int = 0  # 0 = the fleet's
    router_wrong_hash_form: bool = False  # compares raw digests against 64-bit ints (or back)
    xxhash_unshared_seed: bool = False  # instances on xxhash, each drawing its own seed
    tenant_salt: bool = False  # every tenant sends cache_salt = its name
    router_ignores_salt: bool = False  # ... and the router hashes without it
    drop_batches: float = 0.0  # fraction of event batches lost, no replay
    drop_seed: int = 1

    @property
    def active(self) -> bool:
        return self != FailureSpec(drop_seed=self.drop_seed)


@dataclass(frozen=True)
class PrefillSpec:
    params: float = 8.03e9  # the walkthrough's Llama 3.1 8B
    peak_tflops: float = 989.0  # H100 dense BF16
    utilization: float = 0.5
    attention: bool = False  # add Llama-3-8B-shaped causal attention FLOPs


@dataclass(frozen=True)
class FleetConfig:
    title: str = "Fleet"
    description: str = ""
    fleet: FleetSpec = field(default_factory=FleetSpec)
    router: RouterSpec = field(default_factory=RouterSpec)
    workload: WorkloadSpec = field(default_factory=WorkloadSpec)
    failures: FailureSpec = field(default_factory=FailureSpec)
    prefill: PrefillSpec = field(default_factory=PrefillSpec)
    source: str = "<fleet>"

    def healthy(self) -> FleetConfig:
        return replace(self, failures=FailureSpec(drop_seed=self.failures.drop_seed))

    def to_toml(self) -> str:
        return dumps_fleet(self)

    def key(self) -> str:
        """A canonical string naming everything that changes the outcome."""
        return self.to_toml()


@dataclass(frozen=True)
class Limits:
    max_instances: int = 16
    max_requests: int = 2000
    max_num_blocks: int = 200_000
    max_total_blocks: int = 800_000  # instances x num_blocks
    max_block_size: int = 1024
    max_prompt_tokens: int = 32_768  # a system prompt
    max_piece_tokens: int = 8192  # a user message or a reply
    max_turns: int = 64
    max_tenants: int = 64
    max_system_prompts: int = 64


LIMITS = Limits()


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

    def int(self, key: str, default: int, lo: int, hi: int) -> int:
        v = self._get(key)
        if v is _MISSING:
            return default
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            raise self.fail(key, f"expected an integer in {lo}..{hi:,}, got {_show(v)}")
        return v

    def float(self, key: str, default: float, lo: float, hi: float, lo_open: bool = False) -> float:
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

    def bool(self, key: str, default: bool) -> bool:
        v = self._get(key)
        if v is _MISSING:
            return default
        if not isinstance(v, bool):
            raise self.fail(key, f"expected true or false, got {_show(v)}")
        return v

    def str(
        self, key: str, default: str | None, choices: Sequence[str] | None = None, max_len: int = 200
    ) -> str | None:
        v = self._get(key)
        if v is _MISSING:
            return default
        if not isinstance(v, str):
            raise self.fail(key, f"expected a string, got {_show(v)}")
        if choices is not None and v not in choices:
            raise self.fail(key, f"expected one of {', '.join(repr(c) for c in choices)}, got {v!r}")
        if len(v) > max_len:
            raise self.fail(key, f"is {len(v):,} characters long, more than {max_len:,}")
        return v

    def range(self, key: str, default: tuple[int, int], lo: int, hi: int) -> tuple[int, int]:
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
        instances=t.int("instances", 4, 1, limits.max_instances),
        block_size=t.int("block_size", 16, 1, limits.max_block_size),
        num_blocks=t.int("num_blocks", 1000, 2, limits.max_num_blocks),
        hash_algo=t.str("hash_algo", "sha256", HASH_ALGOS),  # type: ignore[arg-type]
        hash_seed=t.str("hash_seed", "", max_len=128),  # type: ignore[arg-type]
        int_block_hashes=t.bool("int_block_hashes", True),
    )
    t.done()
    if fleet.instances * fleet.num_blocks > limits.max_total_blocks:
        raise BadInput(
            f"{source}: [fleet] num_blocks: {fleet.instances} instances x {fleet.num_blocks:,} blocks is more than "
            f"{limits.max_total_blocks:,} blocks in all"
        )

    t = _Table(source, "router", data.get("router"))
    router = RouterSpec(
        load_weight=t.float("load_weight", 8.0, 0.0, 1000.0),
        tie_break=t.str("tie_break", "least_loaded", TIE_BREAKS),  # type: ignore[arg-type]
    )
    t.done()

    t = _Table(source, "workload", data.get("workload"))
    kind = t.str("kind", "chat", WORKLOAD_KINDS)
    prompts = _system_prompts(source, t, limits)
    n_prompts = t.int("system_prompts", len(prompts) or 6, 1, limits.max_system_prompts)
    if prompts and n_prompts != len(prompts):
        raise t.fail("system_prompts", f"is {n_prompts} but {len(prompts)} [[workload.system_prompt]] tables are given")
    workload = WorkloadSpec(
        kind=kind,  # type: ignore[arg-type]
        seed=t.int("seed", 7, 0, 2**31 - 1),
        requests=t.int("requests", 200, 1, limits.max_requests),
        tenants=t.int("tenants", 2, 1, limits.max_tenants),
        system_prompts=n_prompts,
        system_prompt_tokens=t.range("system_prompt_tokens", (300, 1000), 1, limits.max_prompt_tokens),
        user_tokens=t.range("user_tokens", (30, 300), 1, limits.max_piece_tokens),
        output_tokens=t.range("output_tokens", (30, 200), 0, limits.max_piece_tokens),
        turns=t.range("turns", (3, 10), 1, limits.max_turns),
        session_gap_ms=t.float("session_gap_ms", 150.0, 0.0, 1e7, lo_open=True),
        think_ms=t.float("think_ms", 1500.0, 0.0, 1e8),
        decode_ms=t.float("decode_ms", 20.0, 0.0, 1e4),
        prompts=prompts,
        trace=t.str("trace", "shipped", ("shipped", "upload")),  # type: ignore[arg-type]
        trace_outputs=t.bool("trace_outputs", False),
    )
    t.done()

    t = _Table(source, "failures", data.get("failures"))
    algo = t.str("router_hash_algo", "", ("",) + HASH_ALGOS)
    failures = FailureSpec(
        router_hash_algo=algo or "",
        router_hash_seed=t.str("router_hash_seed", None, max_len=128),
        router_block_size=t.int("router_block_size", 0, 0, limits.max_block_size),
        router_wrong_hash_form=t.bool("router_wrong_hash_form", False),
        xxhash_unshared_seed=t.bool("xxhash_unshared_seed", False),
        tenant_salt=t.bool("tenant_salt", False),
        router_ignores_salt=t.bool("router_ignores_salt", False),
        drop_batches=t.float("drop_batches", 0.0, 0.0, 0.95),
        drop_seed=t.int("drop_seed", 1, 0, 2**31 - 1),
    )
    t.done()
    if failures.router_ignores_salt and not failures.tenant_salt:
        raise t.fail("router_ignores_salt", "needs tenant_salt = true (without a salt there is nothing to ignore)")

    t = _Table(source, "prefill", data.get("prefill"))
    prefill = PrefillSpec(
        params=t.float("params", 8.03e9, 0.0, 1e13, lo_open=True),
        peak_tflops=t.float("peak_tflops", 989.0, 0.0, 1e6, lo_open=True),
        utilization=t.float("utilization", 0.5, 0.0, 1.0, lo_open=True),
        attention=t.bool("attention", False),
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
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise BadInput(f"{source}: not valid TOML ({e})") from None
    except RecursionError:
        raise BadInput(f"{source}: not valid TOML (nested too deeply)") from None
    return parse_fleet_dict(data, source, limits)


def load_fleet(path: str | Path, limits: Limits = LIMITS) -> FleetConfig:
    p = Path(path)
    raw = read_user_file(p, "fleet file", MAX_TOML_BYTES)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BadInput(f"{p.name}: not UTF-8 text") from None
    return parse_fleet_text(text, p.name, limits)


def fleets_dir() -> Path:
    return Path(__file__).resolve().parent.parent / "fleets"


def example_fleets() -> dict[str, Path]:
    """The shipped fleet files, by file stem, in name order."""
    d = fleets_dir()
    return {p.stem: p for p in sorted(d.glob("*.toml"))} if d.is_dir() else {}


# ---- writing a config back (share links, the editor) ----------------------------------------------


def dumps_fleet(cfg: FleetConfig) -> str:
    """Canonical TOML for a config: every key written, defaults included, one order."""
    lines = [f"title = {toml_value(cfg.title)}"]
    if cfg.description:
        lines.append(f"description = {toml_value(cfg.description)}")

    def table(name: str, obj: Any, skip: Sequence[str] = ()) -> None:
        lines.extend(["", f"[{name}]"])
        for f in fields(obj):
            if f.name in skip:
                continue
            v = getattr(obj, f.name)
            if v is None:
                continue
            lines.append(f"{f.name} = {toml_value(v)}")

    table("fleet", cfg.fleet)
    table("router", cfg.router)
    w = cfg.workload
    skip = ["prompts"]
    if w.prompts:
        skip += ["system_prompt_tokens"]
    table("workload", w, skip)
    for p in w.prompts:
        lines.extend(["", "[[workload.system_prompt]]"])
        lines.extend(f"{k} = {toml_value(v)}" for k, v in p.as_toml().items())
    table("failures", cfg.failures)
    table("prefill", cfg.prefill)
    return "\n".join(lines) + "\n"


def encode_share(cfg: FleetConfig) -> str:
    """A URL-safe token for a config (``v1.`` + base64url of zlib'd TOML); BadInput when it
    would be longer than `MAX_SHARE_CHARS` (long explicit prompts)."""
    raw = zlib.compress(cfg.to_toml().encode("utf-8"), 9)
    token = SHARE_PREFIX + base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")
    if len(token) > MAX_SHARE_CHARS:
        raise BadInput(
            f"this setup needs a {len(token):,}-character link, more than {MAX_SHARE_CHARS:,}: "
            "shorten the system prompts (or share the TOML file)"
        )
    return token


def decode_share(token: str, limits: Limits = LIMITS) -> FleetConfig:
    """The config in a share token; `BadInput` for anything that is not one. The payload is
    only ever decompressed (capped) and parsed as TOML."""
    if not isinstance(token, str) or not token.startswith(SHARE_PREFIX):
        raise BadInput("shared fleet link: not a fleet token (expected it to start with 'v1.')")
    body = token[len(SHARE_PREFIX) :]
    if len(token) > MAX_SHARE_CHARS:
        raise BadInput(f"shared fleet link: {len(token):,} characters, more than {MAX_SHARE_CHARS:,}")
    if not body or any(c not in _B64URL for c in body):
        raise BadInput("shared fleet link: not base64url text")
    try:
        raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
    except (binascii.Error, ValueError):
        raise BadInput("shared fleet link: not base64url text") from None
    d = zlib.decompressobj()
    try:
        data = d.decompress(raw, MAX_TOML_BYTES + 1)
    except zlib.error:
        raise BadInput("shared fleet link: damaged (not zlib data)") from None
    if len(data) > MAX_TOML_BYTES or d.unconsumed_tail:
        raise BadInput(f"shared fleet link: unpacks to more than {MAX_TOML_BYTES:,} bytes")
    if not d.eof:
        raise BadInput("shared fleet link: damaged (truncated)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise BadInput("shared fleet link: damaged (not UTF-8)") from None
    return parse_fleet_text(text, "shared fleet link", limits)


_B64URL = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


# ---- the request stream -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StreamRequest:
    index: int
    arrival_ms: float
    tokens: tuple[int, ...]
    output: tuple[int, ...]  # the tokens the instance will generate
    duration_ms: float  # how long it stays in flight once admitted
    tenant: int
    session: int  # -1 for a trace
    turn: int
    system_prompt: int  # -1 for a trace


@dataclass(frozen=True)
class RequestStream:
    requests: tuple[StreamRequest, ...]
    kind: str
    source: str
    system_prompt_tokens: tuple[int, ...] = ()  # lengths of the system prompts

    @property
    def prompt_tokens(self) -> int:
        return sum(len(r.tokens) for r in self.requests)


def resolve_system_prompt(p: SystemPrompt, limits: Limits = LIMITS) -> list[int]:
    """Tokenize one explicit system prompt (text with SmolLM2's tokenizer, or a token spec)."""
    from explorer.tokens import encode_text, parse_token_list

    if p.text is not None:
        ids = encode_text(p.text)
        if not ids:
            raise BadInput("system prompt text tokenizes to nothing")
        if len(ids) > limits.max_prompt_tokens:
            raise BadInput(f"system prompt text is {len(ids):,} tokens, more than {limits.max_prompt_tokens:,}")
        return ids
    return parse_token_list(p.prompt, "system prompt", limits.max_prompt_tokens)


def tokenize(value: str, kind: str = "spec", limits: Limits = LIMITS) -> list[int]:
    """The router's tokenizer: ``kind = "spec"`` expands a token spec (``"0:1000, 7*200"``),
    ``"text"`` runs SmolLM2-135M's tokenizer (BadInput where its model file is missing)."""
    from explorer.tokens import encode_text, parse_token_spec

    if not isinstance(value, str) or not value.strip():
        raise BadInput("empty prompt")
    if kind == "spec":
        ids = parse_token_spec(value, limits.max_prompt_tokens * 4)
    elif kind == "text":
        ids = encode_text(value)
    else:
        raise BadInput(f"prompt kind must be 'spec' or 'text', got {kind!r}")
    if not ids:
        raise BadInput("the prompt has no tokens")
    if len(ids) > limits.max_prompt_tokens * 4:
        raise BadInput(f"the prompt has {len(ids):,} tokens, more than {limits.max_prompt_tokens * 4:,}")
    return ids


def chat_stream(w: WorkloadSpec, limits: Limits = LIMITS) -> RequestStream:
    """Chat sessions over shared system prompts, all drawn from ``w.seed``.

    Sessions start ``session_gap_ms`` apart on average (exponential gaps). A session belongs to
    tenant ``session mod tenants``, picks one of the system prompts, and has a number of turns
    in ``turns``. Turn j's prompt is the system prompt, then every earlier user message and
    reply, then the new user message; the reply is what the instance generates. The next turn
    arrives ``len(reply) x decode_ms`` plus an exponential think time later.
    """
    rng = random.Random(f"chat-{w.seed}")
    pop = range(VOCAB_SIZE)

    def draw(n: int) -> list[int]:
        return rng.choices(pop, k=n)

    systems: list[list[int]] = []
    if w.prompts:
        systems = [resolve_system_prompt(p, limits) for p in w.prompts]
    else:
        lo, hi = w.system_prompt_tokens
        systems = [draw(rng.randint(lo, hi)) for _ in range(w.system_prompts)]

    out: list[StreamRequest] = []
    heap: list[tuple[float, int, int]] = [(0.0, 0, -1)]  # (time, order, session; -1 = a new one)
    sessions: list[dict[str, Any]] = []
    order = 1
    total = 0
    while heap and len(out) < w.requests:
        now, _, sid = heapq.heappop(heap)
        if sid < 0:
            sid = len(sessions)
            sessions.append(
                {
                    "tenant": sid % w.tenants,
                    "system": rng.randrange(len(systems)),
                    "turns": rng.randint(*w.turns),
                    "history": [],
                    "turn": 0,
                }
            )
            heapq.heappush(heap, (now + rng.expovariate(1.0 / w.session_gap_ms), order, -1))
            order += 1
        s = sessions[sid]
        user = draw(rng.randint(*w.user_tokens))
        reply = draw(rng.randint(*w.output_tokens))
        prompt = tuple(systems[s["system"]] + s["history"] + user)
        total += len(prompt)
        if total > MAX_STREAM_TOKENS:
            raise BadInput(
                f"[workload]: the stream would hold more than {MAX_STREAM_TOKENS:,} prompt tokens; "
                "use fewer requests, turns or shorter prompts"
            )
        dur = len(reply) * w.decode_ms
        out.append(StreamRequest(len(out), now, prompt, tuple(reply), dur, s["tenant"], sid, s["turn"], s["system"]))
        s["history"] = s["history"] + user + reply
        s["turn"] += 1
        if s["turn"] < s["turns"]:
            think = rng.expovariate(1.0 / w.think_ms) if w.think_ms > 0 else 0.0
            heapq.heappush(heap, (now + dur + think, order, sid))
            order += 1
    return RequestStream(tuple(out), "chat", f"chat sessions (seed {w.seed})", tuple(len(s) for s in systems))


def trace_stream(w: WorkloadSpec, trace_bytes: bytes | None = None, source: str = "trace") -> RequestStream:
    """The first ``w.requests`` requests of a Mooncake trace, expanded as `explorer.trace_replay`
    expands them; arrivals at their timestamps (relative to the first), in flight for
    ``output_length x decode_ms``. Every request is tenant 0."""
    from explorer import trace_replay as tr

    if trace_bytes is not None:
        trace = tr.parse_trace_bytes(trace_bytes, source, limit=w.requests, max_bytes=tr.UI_MAX_TRACE_BYTES)
    else:
        path = tr.shipped_trace_path()
        if not path.is_file():
            raise BadInput("[workload] trace: the shipped Mooncake trace is not installed here; upload one")
        trace = tr.load_trace(path, limit=w.requests)
        source = path.name
    reqs = []
    t0 = min(r.timestamp for r in trace.requests)
    total = 0
    for k, r in enumerate(trace.requests):
        prompt = tuple(tr.expand_prompt(r))
        total += len(prompt)
        if total > MAX_STREAM_TOKENS:
            raise BadInput(
                f"{source}: the first {k + 1} requests hold more than {MAX_STREAM_TOKENS:,} prompt tokens; use fewer requests"
            )
        output = (0,) * r.output_length if w.trace_outputs else ()
        reqs.append(
            StreamRequest(k, float(r.timestamp - t0), prompt, output, r.output_length * w.decode_ms, 0, -1, 0, -1)
        )
    reqs.sort(key=lambda q: (q.arrival_ms, q.index))
    reqs = [replace(q, index=i) for i, q in enumerate(reqs)]
    return RequestStream(tuple(reqs), "trace", source)


def build_stream(cfg: FleetConfig, trace_bytes: bytes | None = None, trace_name: str = "upload") -> RequestStream:
    w = cfg.workload
    if w.kind == "chat":
        return chat_stream(w)
    if w.trace == "upload" and trace_bytes is None:
        raise BadInput('[workload] trace = "upload": upload a Mooncake trace (JSON lines) first')
    return trace_stream(w, trace_bytes if w.trace == "upload" else None, trace_name)


# ---- the router ---------------------------------------------------------------------------------


def other_algo(algo: str) -> str:
    """The algorithm a misconfigured router uses instead of ``algo``."""
    return {"sha256": "sha256_cbor", "sha256_cbor": "sha256", "xxhash": "xxhash_cbor", "xxhash_cbor": "xxhash"}[algo]


def other_block_size(block_size: int) -> int:
    return 32 if block_size != 32 else 16


def other_seed(seed: str) -> str:
    """A router started with PYTHONHASHSEED=0 (which vLLM reads as the NONE_HASH seed)."""
    return "0" if seed != "0" else "1"


def drawn_seed(label: str, seed: int) -> str:
    """What ``os.urandom(32).hex()`` would give, drawn from the workload seed so a run repeats."""
    return random.Random(f"{label}-{seed}").randbytes(32).hex()


@dataclass
class Decision:
    instance: int
    matches: list[int]  # matched blocks per instance (capped)
    costs: list[float]
    tied: list[int]
    prompt_blocks: int  # hashable blocks the lookup may cover


class PrefixRouter:
    """Hashes requests as vLLM would, reads the subscriber's per-instance hash multisets, and
    picks the instance with the lowest ``blocks to prefill + load_weight x requests in flight``."""

    def __init__(
        self,
        block_size: int,
        ctx: HashContext,
        hash_form: str = "int64",
        load_weight: float = 0.0,
        tie_break: str = "least_loaded",
        rng_seed: int = 0,
    ) -> None:
        if hash_form not in HASH_FORMS:
            raise BadInput(f"hash form must be one of {', '.join(HASH_FORMS)}, got {hash_form!r}")
        if tie_break not in TIE_BREAKS:
            raise BadInput(f"tie_break must be one of {', '.join(TIE_BREAKS)}, got {tie_break!r}")
        self.block_size = block_size
        self.ctx = ctx
        self.hash_form = hash_form
        self.load_weight = load_weight
        self.tie_break = tie_break
        self._hasher = get_request_block_hasher(block_size, ctx)
        self._rng = random.Random(f"tie-{rng_seed}")
        self._cursor = 0

    def block_hashes(self, tokens: Sequence[int], cache_salt: str | None = None) -> list[BlockHash]:
        """The request's chain, by the same request block hasher an engine runs."""
        return list(Request("router", tokens, self._hasher, cache_salt=cache_salt).block_hashes)

    def keys(self, hashes: Sequence[BlockHash]) -> list[int | bytes]:
        """The hashes in the form the router compares with event hashes."""
        if self.hash_form == "int64":
            return [external_block_hash(h) for h in hashes]
        return [bytes(h) for h in hashes]

    def request_keys(self, tokens: Sequence[int], cache_salt: str | None = None) -> tuple[list[int | bytes], int]:
        """(keys, cap): the keys, and how many blocks a lookup may hit (never the last token)."""
        keys = self.keys(self.block_hashes(tokens, cache_salt))
        return keys, min(len(keys), (len(tokens) - 1) // self.block_size)

    @staticmethod
    def match(keys: Sequence[int | bytes], view: Mapping[Any, int] | None, cap: int) -> int:
        """The longest run of ``keys[:cap]`` present in ``view``."""
        if not view:
            return 0
        n = 0
        for k in keys[:cap]:
            if not view.get(k):
                break
            n += 1
        return n

    def choose(
        self, keys: Sequence[int | bytes], cap: int, views: Sequence[Mapping[Any, int] | None], loads: Sequence[int]
    ) -> Decision:
        matches = [self.match(keys, v, cap) for v in views]
        costs = [(cap - m) + self.load_weight * load for m, load in zip(matches, loads)]
        best = min(costs)
        tied = [i for i, c in enumerate(costs) if c <= best + 1e-9]
        return Decision(self._break_tie(tied, loads), matches, costs, tied, cap)

    def _break_tie(self, tied: list[int], loads: Sequence[int]) -> int:
        if len(tied) == 1:
            choice = tied[0]
        elif self.tie_break == "least_loaded":
            choice = min(tied, key=lambda i: (loads[i], i))
        elif self.tie_break == "lowest_index":
            choice = tied[0]
        elif self.tie_break == "random":
            choice = self._rng.choice(tied)
        else:  # round_robin: the first tied instance at or after the cursor
            n = len(loads)
            choice = min(tied, key=lambda i: (i - self._cursor) % n)
        self._cursor = (choice + 1) % len(loads)
        return choice


# ---- setup: who hashes how ------------------------------------------------------------------------


@dataclass(frozen=True)
class HashSetup:
    """The effective hashing of the engines and of the router under a config's switches."""

    engine_algo: str
    engine_seeds: tuple[str | None, ...]  # per instance: the seed to pass (None = the default)
    event_form: str  # what the events carry: "int64" or "digest"
    router_algo: str
    router_seed: str | None
    router_block_size: int
    router_form: str
    router_salt: bool  # the router hashes with the request's cache_salt

    def router_ctx(self) -> HashContext:
        return init_none_hash(self.router_algo, self.router_seed)


def hash_setup(cfg: FleetConfig) -> HashSetup:
    f, fl, seed = cfg.failures, cfg.fleet, cfg.workload.seed
    algo = fl.hash_algo
    fleet_seed: str | None = fl.hash_seed or None
    if f.xxhash_unshared_seed:
        algo = algo if algo in NON_CRYPTO_HASH_ALGOS else "xxhash"
        fleet_seed = None
    if algo in NON_CRYPTO_HASH_ALGOS and fleet_seed is None:
        # Each vLLM process draws os.urandom(32).hex(); here the draws come from the seed.
        seeds: tuple[str | None, ...] = tuple(drawn_seed(f"instance-{i}", seed) for i in range(fl.instances))
        router_seed: str | None = drawn_seed("router", seed)
    else:
        seeds = (fleet_seed,) * fl.instances
        router_seed = fleet_seed
    if f.router_hash_seed is not None:
        router_seed = f.router_hash_seed
    event_form = "int64" if fl.int_block_hashes else "digest"
    router_form = event_form
    if f.router_wrong_hash_form:
        router_form = "digest" if event_form == "int64" else "int64"
    return HashSetup(
        engine_algo=algo,
        engine_seeds=seeds,
        event_form=event_form,
        router_algo=f.router_hash_algo or algo,
        router_seed=router_seed,
        router_block_size=f.router_block_size or fl.block_size,
        router_form=router_form,
        router_salt=f.tenant_salt and not f.router_ignores_salt,
    )


def tenant_salt(tenant: int) -> str:
    return f"tenant-{tenant}"


class HashMemo:
    """Prompt hash chains of one stream, per (algorithm, resolved seed, block size, salted).

    Equal inputs give equal hashes, so a chain computed once (by the router or by any engine
    with the same hashing) is handed to every later engine with the same hashing instead of
    being recomputed: it only saves time. Engines hash their output blocks themselves.
    """

    def __init__(self, stream: RequestStream) -> None:
        self.stream = stream
        self.tables: dict[tuple[str, str, int, bool], dict[int, tuple[BlockHash, ...]]] = {}
        self.computed = 0
        self.reused = 0

    def table(self, ctx: HashContext, block_size: int, salted: bool) -> dict[int, tuple[BlockHash, ...]]:
        return self.tables.setdefault((ctx.algo, ctx.hash_seed, block_size, salted), {})


class _MemoHasher:
    """An engine's request block hasher that takes a new request's prompt chain from the memo
    (request ids are ``r<stream index>``) and runs the real hasher for everything else."""

    def __init__(
        self, real: Callable[[Request], list[BlockHash]], table: dict[int, tuple[BlockHash, ...]], memo: HashMemo
    ) -> None:
        self.real, self.table, self.memo = real, table, memo

    def __call__(self, request: Request) -> list[BlockHash]:
        if request.block_hashes or request.output_token_ids:
            return self.real(request)
        k = int(request.request_id[1:])
        got = self.table.get(k)
        if got is None:
            got = self.table[k] = tuple(self.real(request))
            self.memo.computed += 1
        else:
            self.memo.reused += 1
        return list(got)


# ---- running a fleet -----------------------------------------------------------------------------


@dataclass
class InstanceResult:
    name: str
    routed: int  # requests the router sent here
    stats: dict[str, int]  # the engine's own PrefixCacheStats totals
    prefill_full_ms: float  # estimate: every admitted prompt computed in full
    prefill_ms: float  # estimate: what was computed (the hits skipped)
    max_queue: int  # longest FIFO queue seen
    subscriber: dict[str, int]  # the subscriber's counters for this instance
    view_hashes: int  # distinct hashes in the router's view at the end
    engine_hashes: int  # distinct hashes the engine holds at the end
    phantom: int  # in the view, no longer in the engine (missed removals)
    missing: int  # in the engine, not in the view (missed stores)
    seed: str | None  # the engine's resolved NONE_HASH seed

    @property
    def hit_tokens(self) -> int:
        return self.stats["hits"]

    @property
    def queries(self) -> int:
        return self.stats["queries"]

    @property
    def hit_rate(self) -> float:
        return self.hit_tokens / self.queries if self.queries else 0.0

    @property
    def saved_ms(self) -> float:
        return self.prefill_full_ms - self.prefill_ms


@dataclass
class PolicyRun:
    policy: str
    instances: list[InstanceResult]
    instance_of: list[int]  # per stream request; -1 = skipped
    hit_tokens: list[int]  # per request: the engine's local hit at admission
    predicted_tokens: list[int]  # per request: the router's match on the chosen instance
    best_match_tokens: list[int]  # per request: the router's best match on any instance
    prompt_tokens: list[int]
    waited: list[bool]  # queued behind others before admission
    cross_tenant_hit_tokens: int
    subscriber: dict[str, int]
    published_batches: int  # batches the instances published
    dropped_batches: int  # ... of which never reached the subscriber
    router_keys: int  # distinct router hashes over the stream
    router_keys_known: int  # ... of which any instance ever published (in the events' form)
    seconds: float
    final_views: list[dict[Any, int]] = field(default_factory=list, repr=False)

    @property
    def label(self) -> str:
        return POLICY_LABELS.get(self.policy, "prefix-aware, no failures" if self.policy == BASELINE else self.policy)

    @property
    def queries(self) -> int:
        return sum(i.queries for i in self.instances)

    @property
    def hits(self) -> int:
        return sum(i.hit_tokens for i in self.instances)

    @property
    def hit_rate(self) -> float:
        q = self.queries
        return self.hits / q if q else 0.0

    @property
    def saved_ms(self) -> float:
        return sum(i.saved_ms for i in self.instances)

    @property
    def prefill_ms(self) -> float:
        return sum(i.prefill_ms for i in self.instances)

    @property
    def predicted(self) -> int:
        return sum(self.predicted_tokens)

    @property
    def skipped(self) -> int:
        return sum(1 for i in self.instance_of if i < 0)

    def prediction_check(self) -> dict[str, int]:
        """For requests admitted at once: did the router's match equal the engine's hit?"""
        out = {"exact": 0, "over": 0, "under": 0, "queued": 0}
        for inst, p, h, w in zip(self.instance_of, self.predicted_tokens, self.hit_tokens, self.waited):
            if inst < 0:
                continue
            if w:
                out["queued"] += 1
            elif p == h:
                out["exact"] += 1
            elif p > h:
                out["over"] += 1
            else:
                out["under"] += 1
        return out

    def imbalance(self, what: str = "prefill_ms") -> float:
        """max / mean over instances (1.0 = perfectly even)."""
        vals = [getattr(i, what) if what != "routed" else i.routed for i in self.instances]
        mean = sum(vals) / len(vals) if vals else 0.0
        return max(vals) / mean if mean else 1.0

    def summary(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "hit_rate": self.hit_rate,
            "hit_tokens": self.hits,
            "prompt_tokens": self.queries,
            "saved_ms": self.saved_ms,
            "prefill_ms": self.prefill_ms,
            "router_match_tokens": self.predicted,
            "imbalance_prefill": self.imbalance("prefill_ms"),
            "imbalance_requests": self.imbalance("routed"),
            "skipped": self.skipped,
            "gaps": self.subscriber["gaps"],
            "lost": self.subscriber["lost"],
            "cross_tenant_hit_tokens": self.cross_tenant_hit_tokens,
        }


class _Inst:
    """One simulated instance: an engine, its publisher side, and the router's bookkeeping."""

    def __init__(
        self,
        i: int,
        cfg: FleetConfig,
        algo: str,
        seed: str | None,
        stream: KVEventStream,
        drop: Callable[[], bool],
        memo: HashMemo | None,
        published: set,
    ) -> None:
        fl = cfg.fleet
        self.index = i
        self.name = f"instance-{i}"
        self.topic = self.name.encode()
        engine_cfg = EngineConfig(
            block_size=fl.block_size,
            num_blocks=fl.num_blocks,
            max_model_len=MAX_MODEL_LEN,
            hash_algo=algo,
            hash_seed=seed or "",
            enable_prefix_caching=True,
            events=True,
            int_block_hashes=fl.int_block_hashes,
        )
        self.engine = ScenarioEngine(
            Scenario(self.name, engine_cfg, (), source=self.name), hash_seed=seed, record=False
        )
        self.seed = self.engine.ctx.hash_seed if self.engine.ctx else None
        if memo is not None and self.engine.ctx is not None and self.engine.hasher is not None:
            table = memo.table(self.engine.ctx, fl.block_size, cfg.failures.tenant_salt)
            self.engine.hasher = _MemoHasher(self.engine.hasher, table, memo)
        self.stream = stream
        self.drop = drop
        self.published = published
        self.seq = 0
        self.pending_events: list = []
        self.waiting: deque[int] = deque()
        self.in_flight = 0
        self.routed = 0
        self.max_queue = 0
        self.full_ms = 0.0
        self.computed_ms = 0.0
        self.first_tenant: dict[bytes, int] = {}
        self.ops = 0

    def apply(self, op: str, rid: str, **kw: Any):
        self.ops += 1
        step = self.engine.apply(Op(self.ops, op, id=rid, **kw))
        if step.events:
            self.pending_events.extend(step.events)
        return step

    def publish(self, now_ms: float) -> None:
        """One engine step's events as one batch (none when there are none), as the scheduler
        publishes them; the frames reach the subscriber unless this batch is dropped."""
        if not self.pending_events:
            return
        for ev in self.pending_events:
            if isinstance(ev, BlockStored):
                self.published.update(ev.block_hashes)
        batch = KVEventBatch(now_ms / 1000.0, self.pending_events, 0)
        self.pending_events = []
        seq, self.seq = self.seq, self.seq + 1
        if self.drop():
            return
        self.stream.feed_live(live_frames(self.topic, seq, encode_batch(batch)), now=0.0)

    def view(self) -> dict[Any, int] | None:
        inst = self.stream.instances.get((self.name, 0))
        return inst.hashes if inst is not None else None

    def engine_keys(self, form: str) -> set:
        out = set()
        for key in self.engine.pool.cached_block_hash_to_block._cache:
            h = get_block_hash(key)
            out.add(external_block_hash(h) if form == "int64" else bytes(h))
        return out


def _footprint(req: StreamRequest) -> int:
    """Slots a request holds at its largest: the prompt plus every output token but the last."""
    return len(req.tokens) + max(len(req.output) - 1, 0)


def _skipped(req: StreamRequest, fl: FleetSpec) -> bool:
    return -(-_footprint(req) // fl.block_size) > fl.num_blocks - 1


class _Estimator:
    def __init__(self, p: PrefillSpec) -> None:
        self.p = p
        self.memo: dict[tuple[int, int], tuple[float, float]] = {}

    def __call__(self, prompt: int, hit: int) -> tuple[float, float]:
        """(full ms, computed ms) of one prefill."""
        got = self.memo.get((prompt, hit))
        if got is None:
            p = self.p
            e = estimate_prefill(
                p.params, prompt, hit, p.peak_tflops * 1e12, p.utilization, LLAMA3_8B_SHAPE if p.attention else None
            )
            got = self.memo[(prompt, hit)] = (e.full_s * 1e3, e.cached_s * 1e3)
        return got


def run_policy(
    cfg: FleetConfig,
    stream: RequestStream,
    policy: str,
    setup: HashSetup | None = None,
    router_keys: Sequence[tuple[list[Any], int]] | None = None,
    keep_views: bool = False,
    memo: HashMemo | None = None,
) -> PolicyRun:
    """One policy over the stream with fresh engines and a fresh subscriber."""
    if policy not in POLICIES:
        raise BadInput(f"unknown policy {policy!r}: expected one of {', '.join(POLICIES)}")
    t0 = time.perf_counter()
    setup = setup or hash_setup(cfg)
    fl, f = cfg.fleet, cfg.failures
    router = PrefixRouter(
        setup.router_block_size,
        setup.router_ctx(),
        setup.router_form,
        cfg.router.load_weight,
        cfg.router.tie_break,
        cfg.workload.seed,
    )
    if memo is not None and memo.stream is not stream:
        raise ValueError("the hash memo belongs to another stream")
    if router_keys is None:
        router_keys = stream_keys(router, stream, setup, cfg, memo)
    subscriber = KVEventStream(replay=False)
    drop_rng = random.Random(f"drop-{f.drop_seed}")
    rate = f.drop_batches

    dropped = [0]

    def drop() -> bool:
        if rate > 0 and drop_rng.random() < rate:
            dropped[0] += 1
            return True
        return False

    published: set = set()  # every hash any instance ever announced (as the events carry it)
    insts = [
        _Inst(i, cfg, setup.engine_algo, setup.engine_seeds[i], subscriber, drop, memo, published)
        for i in range(fl.instances)
    ]
    est = _Estimator(cfg.prefill)
    n = len(stream.requests)
    instance_of = [-1] * n
    hit_tokens = [0] * n
    predicted = [0] * n
    best = [0] * n
    waited = [False] * n
    cross = 0
    bs = fl.block_size
    finishes: list[tuple[float, int, int]] = []  # (time, request, instance)
    rr = 0
    distinct_keys: set = set()

    def admit_waiting(inst: _Inst, now: float) -> None:
        nonlocal cross
        eng = inst.engine
        single = eng.manager.single_type_managers[0]
        while inst.waiting:
            k = inst.waiting[0]
            req = stream.requests[k]
            rid = f"r{k}"
            r = eng.requests[rid]
            free = eng.pool.get_num_free_blocks()
            fp = _footprint(req)
            # A hit never needs more blocks than computing everything would, so a lookup is
            # only needed to decide when the room is tight.
            if -(-fp // bs) > free:
                hit_blocks, _ = eng.manager.get_computed_blocks(r)
                if single.get_num_blocks_to_allocate(rid, fp, hit_blocks.blocks[0]) > free:
                    return
            inst.waiting.popleft()
            step = inst.apply("admit", rid)
            assert step.ok, "admission was checked to fit"
            hit = step.hit_tokens or 0
            hit_tokens[k] = hit
            full, done = est(len(req.tokens), hit)
            inst.full_ms += full
            inst.computed_ms += done
            out = req.output
            if len(out) > 1:
                # `sample` all but the last output token at once (append_output_token_ids takes
                # a list; the hasher then hashes the newly full blocks), compute them in one
                # step, then sample the last one, which stays pending as in vLLM.
                r.append_output_token_ids(list(out[:-1]))
                step = inst.apply("decode", rid)
                assert step.ok, "the footprint was checked to fit"
            if out:
                r.append_output_token_ids(out[-1])
            # who cached what first, to tell cross-tenant hits apart
            hashes = r.block_hashes
            ft = inst.first_tenant
            for h in hashes[: hit // bs]:
                if ft.get(h, req.tenant) != req.tenant:
                    cross += bs
            for h in hashes:
                ft.setdefault(h, req.tenant)
            heapq.heappush(finishes, (now + req.duration_ms, k, inst.index))

    def finish_until(t: float) -> None:
        while finishes and finishes[0][0] <= t:
            when, k, i = heapq.heappop(finishes)
            inst = insts[i]
            inst.apply("finish", f"r{k}")
            inst.in_flight -= 1
            admit_waiting(inst, when)
            inst.publish(when)

    for req in stream.requests:
        k = req.index
        now = req.arrival_ms
        finish_until(now)
        if _skipped(req, fl):
            continue
        keys, cap = router_keys[k]
        views = [inst.view() for inst in insts]
        loads = [inst.in_flight for inst in insts]
        distinct_keys.update(keys[:cap])
        if policy == "prefix":
            d = router.choose(keys, cap, views, loads)
            choice, matches = d.instance, d.matches
        else:
            matches = [router.match(keys, v, cap) for v in views]
            if policy == "round_robin":
                choice = rr % fl.instances
                rr += 1
            else:
                choice = min(range(fl.instances), key=lambda i: (loads[i], i))
        instance_of[k] = choice
        predicted[k] = matches[choice] * setup.router_block_size
        best[k] = max(matches) * setup.router_block_size
        inst = insts[choice]
        inst.routed += 1
        inst.in_flight += 1
        salt = tenant_salt(req.tenant) if f.tenant_salt else None
        inst.apply("arrive", f"r{k}", prompt=req.tokens, cache_salt=salt)
        waited[k] = bool(inst.waiting)
        inst.waiting.append(k)
        inst.max_queue = max(inst.max_queue, len(inst.waiting))
        admit_waiting(inst, now)
        if k in inst.waiting:
            waited[k] = True
        inst.publish(now)
    finish_until(math.inf)

    results = []
    for inst in insts:
        eng = inst.engine
        view = inst.view() or {}
        truth = inst.engine_keys(setup.event_form)
        vk = {h for h, c in view.items() if c > 0}
        sub = subscriber.instances.get((inst.name, 0))
        results.append(
            InstanceResult(
                name=inst.name,
                routed=inst.routed,
                stats=eng.totals.as_dict(),
                prefill_full_ms=inst.full_ms,
                prefill_ms=inst.computed_ms,
                max_queue=inst.max_queue,
                subscriber=sub.counters() if sub is not None else {"batches": 0, "gaps": 0, "lost": 0},
                view_hashes=len(vk),
                engine_hashes=len(truth),
                phantom=len(vk - truth),
                missing=len(truth - vk),
                seed=inst.seed,
            )
        )
        # the engine's stats are the numbers we show: they must agree with what we recorded
        assert eng.totals.hits == sum(h for h, i in zip(hit_tokens, instance_of) if i == inst.index)
    return PolicyRun(
        policy=policy,
        instances=results,
        instance_of=instance_of,
        hit_tokens=hit_tokens,
        predicted_tokens=predicted,
        best_match_tokens=best,
        prompt_tokens=[len(r.tokens) for r in stream.requests],
        waited=waited,
        cross_tenant_hit_tokens=cross,
        subscriber=subscriber.summary(),
        published_batches=sum(inst.seq for inst in insts),
        dropped_batches=dropped[0],
        router_keys=len(distinct_keys),
        router_keys_known=len(distinct_keys & published),
        seconds=time.perf_counter() - t0,
        final_views=[dict(inst.view() or {}) for inst in insts] if keep_views else [],
    )


def stream_keys(
    router: PrefixRouter, stream: RequestStream, setup: HashSetup, cfg: FleetConfig, memo: HashMemo | None = None
) -> list[tuple[list[Any], int]]:
    """The router's keys and lookup cap for every request of the stream (hashed once)."""
    out = []
    salt_on = cfg.failures.tenant_salt and setup.router_salt
    table = memo.table(router.ctx, router.block_size, salt_on) if memo is not None else None
    bs = router.block_size
    for req in stream.requests:
        hashes = table.get(req.index) if table is not None else None
        if hashes is None:
            hashes = tuple(router.block_hashes(req.tokens, tenant_salt(req.tenant) if salt_on else None))
            if table is not None:
                table[req.index] = hashes
        keys = router.keys(hashes)
        out.append((keys, min(len(keys), (len(req.tokens) - 1) // bs)))
    return out


@dataclass
class FleetResult:
    config: FleetConfig
    stream: RequestStream
    setup: HashSetup
    runs: dict[str, PolicyRun]  # by policy, plus BASELINE when a failure switch is on
    seconds: float

    @property
    def policies(self) -> list[str]:
        return [p for p in POLICIES if p in self.runs]

    def router(self) -> PrefixRouter:
        s, c = self.setup, self.config
        return PrefixRouter(
            s.router_block_size,
            s.router_ctx(),
            s.router_form,
            c.router.load_weight,
            c.router.tie_break,
            c.workload.seed,
        )

    def summary(self) -> dict[str, Any]:
        return {p: r.summary() for p, r in self.runs.items()}


def simulate(
    cfg: FleetConfig,
    trace_bytes: bytes | None = None,
    trace_name: str = "upload",
    policies: Sequence[str] = POLICIES,
    baseline: bool = True,
    stream: RequestStream | None = None,
    memoize: bool = True,
) -> FleetResult:
    """Every policy over the same stream; with a failure switch on (and ``baseline``), also the
    prefix policy with every switch off, for comparison."""
    t0 = time.perf_counter()
    stream = stream or build_stream(cfg, trace_bytes, trace_name)
    setup = hash_setup(cfg)
    router = PrefixRouter(setup.router_block_size, setup.router_ctx(), setup.router_form)
    memo = HashMemo(stream) if memoize else None
    keys = stream_keys(router, stream, setup, cfg, memo)
    runs = {p: run_policy(cfg, stream, p, setup, keys, keep_views=(p == "prefix"), memo=memo) for p in policies}
    if baseline and cfg.failures.active and "prefix" in policies:
        healthy = cfg.healthy()
        runs[BASELINE] = replace(run_policy(healthy, stream, "prefix", None, None, memo=memo), policy=BASELINE)
    return FleetResult(cfg, stream, setup, runs, time.perf_counter() - t0)


# ---- asking the router about one prompt ----------------------------------------------------------


@dataclass
class Answer:
    tokens: int
    blocks: int
    cap: int
    matches: list[int]  # blocks per instance
    instance: int


def ask(result: FleetResult, prompt: str, kind: str = "spec", tenant: int = 0) -> Answer:
    """Where the router would send ``prompt`` (a token spec, or text) against the final state
    of the prefix-aware run (nothing in flight any more)."""
    run = result.runs.get("prefix")
    if run is None or not run.final_views:
        raise BadInput("run the prefix-aware policy first")
    tokens = tokenize(prompt, kind)
    router = result.router()
    salt = tenant_salt(tenant) if result.config.failures.tenant_salt and result.setup.router_salt else None
    keys, cap = router.request_keys(tokens, salt)
    d = router.choose(keys, cap, run.final_views, [0] * len(run.final_views))
    return Answer(len(tokens), len(keys), cap, d.matches, d.instance)


# ---- explanations -------------------------------------------------------------------------------


SWITCH_HELP: dict[str, str] = {
    "router_hash_algo": (
        "The router hashes with another algorithm than the instances (say sha256_cbor against "
        "sha256). Every block hash differs, so no published hash ever matches one of the router's."
    ),
    "router_hash_seed": (
        "The router's NONE_HASH comes from another seed: vLLM reads PYTHONHASHSEED as the seed, so a "
        "router process started with PYTHONHASHSEED=0 chains from another first parent, and every "
        "hash of the chain differs."
    ),
    "router_block_size": (
        "The router cuts prompts into blocks of another size. Its blocks hold other tokens, so "
        "their hashes exist nowhere in the fleet."
    ),
    "router_wrong_hash_form": (
        "Events carry the low 64 bits of each hash as an int (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES, "
        "on by default); a router that keys its lookup on the raw 32-byte digests compares bytes "
        "with ints and never finds one."
    ),
    "xxhash_unshared_seed": (
        "With xxhash and no PYTHONHASHSEED every vLLM process draws its own random seed (a "
        "predictable one would let an attacker precompute collisions), so equal prompts hash "
        "differently on every instance and on the router."
    ),
    "tenant_salt": (
        "Each tenant sends its own cache_salt. It goes into the first block's extra keys, so the "
        "whole chain differs per tenant: a tenant only ever hits its own blocks, even on a shared "
        "system prompt (which closes the timing side channel)."
    ),
    "router_ignores_salt": (
        "The router hashes without the request's cache_salt, while the instances hash with it: "
        "its chains match nothing."
    ),
    "drop_batches": (
        "Some event batches never reach the router and nobody asks for a replay. The subscriber "
        "counts the gaps, but its view goes stale: stores it missed look absent, removals it "
        "missed leave phantom blocks behind."
    ),
}


def explain(result: FleetResult) -> list[tuple[str, str]]:
    """(switch, one sentence from the numbers) for each failure switch that is on, then a line
    comparing the policies."""
    cfg, s = result.config, result.setup
    f = cfg.failures
    run = result.runs.get("prefix")
    base = result.runs.get(BASELINE)
    out: list[tuple[str, str]] = []
    if run is None:
        return out
    rr = result.runs.get("round_robin")
    matched = run.predicted
    known = run.router_keys_known
    total = run.router_keys
    tail = f"the prefix-aware hit rate is {run.hit_rate:.1%}"
    if base is not None:
        tail += f" (with every switch off: {base.hit_rate:.1%})"
    if rr is not None:
        tail += f", round robin {rr.hit_rate:.1%}"
    zero = (
        f"the router matched {matched:,} tokens: {known:,} of its {total:,} distinct block hashes were ever in an "
        f"instance's published set, so it routed on load and tie-break alone; {tail}."
    )
    if f.router_hash_algo and f.router_hash_algo != s.engine_algo:
        out.append(
            ("router_hash_algo", f"Router hashes with {f.router_hash_algo}, instances with {s.engine_algo}: " + zero)
        )
    if f.router_hash_seed is not None and f.router_hash_seed != s.engine_seeds[0]:
        out.append(
            (
                "router_hash_seed",
                f"Router seeds NONE_HASH with {f.router_hash_seed!r}, the instances with "
                f"{run.instances[0].seed!r}: " + zero,
            )
        )
    if f.router_block_size and f.router_block_size != cfg.fleet.block_size:
        out.append(
            (
                "router_block_size",
                f"Router cuts {f.router_block_size}-token blocks, the instances "
                f"{cfg.fleet.block_size}-token ones: " + zero,
            )
        )
    if f.router_wrong_hash_form:
        what = (
            "raw digests against 64-bit int event hashes"
            if s.event_form == "int64"
            else "64-bit ints against raw-digest event hashes"
        )
        out.append(("router_wrong_hash_form", f"Router compares {what}: " + zero))
    if f.xxhash_unshared_seed or (s.engine_algo in NON_CRYPTO_HASH_ALGOS and len(set(s.engine_seeds)) > 1):
        out.append(
            (
                "xxhash_unshared_seed",
                f"The {cfg.fleet.instances} instances run {s.engine_algo} with "
                f"{len(set(s.engine_seeds))} different drawn seeds and the router with one more: " + zero,
            )
        )
    if f.tenant_salt:
        if f.router_ignores_salt:
            out.append(
                ("router_ignores_salt", "Instances hash with each tenant's cache_salt, the router without: " + zero)
            )
        else:
            base_cross = base.cross_tenant_hit_tokens if base is not None else None
            more = f" (without salts {base_cross:,} hit tokens crossed tenants)" if base_cross is not None else ""
            out.append(
                (
                    "tenant_salt",
                    f"With a cache_salt per tenant, {run.cross_tenant_hit_tokens:,} hit tokens "
                    f"crossed tenants{more}: {cfg.workload.tenants} tenants sharing "
                    f"{cfg.workload.system_prompts} system prompts now each cache their own copy; {tail}.",
                )
            )
    if f.drop_batches > 0:
        sub = run.subscriber
        phantom = sum(i.phantom for i in run.instances)
        missing = sum(i.missing for i in run.instances)
        chk = run.prediction_check()
        base_match = f" (with every batch: {base.predicted:,})" if base is not None else ""
        unseen = run.dropped_batches - sub["lost"]
        more = f"; {unseen:,} more went unnoticed (at the start or the end of an instance's stream)" if unseen else ""
        out.append(
            (
                "drop_batches",
                f"{run.dropped_batches:,} of {run.published_batches:,} batches were lost and "
                f"the subscriber counted {sub['gaps']:,} missing sequence numbers (no replay){more}: at the end the router's view holds {phantom:,} "
                f"evicted blocks and misses {missing:,} cached ones; it matched {matched:,} tokens{base_match}, "
                f"and for {chk['over'] + chk['under']:,} requests admitted at once its match differed from the "
                f"engine's hit; {tail}.",
            )
        )
    if not out:
        ll = result.runs.get("least_loaded")
        parts = [f"{POLICY_LABELS[p]} {result.runs[p].hit_rate:.1%}" for p in POLICIES if p in result.runs]
        chk = run.prediction_check()
        line = (
            f"Hit rate: {', '.join(parts)}. The router's match equalled the engine's own hit for "
            f"{chk['exact']:,} of {chk['exact'] + chk['over'] + chk['under']:,} requests admitted at once"
        )
        if ll is not None and ll.hits:
            line += f"; it saved {run.saved_ms - ll.saved_ms:,.0f} ms of estimated prefill over least-loaded"
        out.append(("healthy", line + "."))
    return out
