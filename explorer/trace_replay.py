"""`python -m explorer replay TRACE.jsonl`: real request traffic through the faithful engine.

A trace is in Mooncake's format (design section 4): one JSON object per line with
`timestamp` (ms), `input_length`, `output_length` and `hash_ids`, one id per 512-token block of
the prompt. Equal ids mean equal content with an equal prefix. The explorer turns ids into
tokens: token j of trace block i is ``hash_ids[i] * 512 + j``, and a prompt is the first
`input_length` tokens of that expansion.

Policies (what ``--policy`` selects):

- ``vllm`` (default): the real `KVCacheManager`, `Request` and sha256 block hasher (default
  seed), driven as vLLM's scheduler drives them. Each request, in file order, arrives, is
  admitted whole (``get_computed_blocks``, ``allocate_slots``, then the stats are recorded),
  with ``--outputs`` generates `output_length` tokens of 0 (each step first computes the
  pending token, then samples one; the last sampled token stays pending, as in vLLM) and
  finishes before the next one arrives. The hit tokens are exactly vLLM's.
- ``lru``: NOT vLLM. A small simulator over block hashes: a cache of ``num_blocks - 1``
  blocks with plain least-recently-used eviction, recency in token order (a request's first
  block is its least recent one). vLLM frees a request's blocks in reverse, so its tail is
  evicted before its head; plain LRU does the opposite, and the comparison shows what that
  order is worth.
- ``unbounded``: NOT vLLM. Every block ever cached stays cached; nothing is skipped. The
  ceiling: no eviction policy can hit more, at any cache size.

Both simulators use the same block hashes, the same lookup rule (the longest cached prefix,
never covering a prompt's last token) and the same blocks the engine would cache.

Concurrency (``--concurrent``, vllm policy only) replaces "one request at a time" by a simple
timed policy, documented in `replay_concurrent`: requests arrive at their timestamps, wait in
FIFO order until the engine has room for them, run for ``output_length * decode_ms`` and hold
their blocks until they finish.

A request is skipped (never replayed, no hit) iff it could not fit even in an empty cache:
``cdiv(input_length + (output_length - 1 if --outputs and output_length > 0 else 0),
block_size) > num_blocks - 1``. Skipped requests still count in ``requests`` and
``prompt_tokens``.

Hashing is the largest single cost of a plain replay (over half of it on the shipped trace).
Every request's prompt block hashes are computed once (`prepare`) and reused by every cache
size and policy of a sweep; inside one trace a 512-token trace block reached by the same chain
of ids always yields the same block hashes, so those are computed once per distinct chain (a
trie over the ids: 1.3M blocks instead of 3.8M for the shipped trace at block size 16). The
hashes are the core hasher's, block by block (`hash_block_tokens`), and a request gets them
through its `block_hasher`, which falls back to the core's own request hasher for output
tokens; `replay_vllm_plain` skips the shortcut, and the tests check both agree.
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import sys
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from explorer.core.hashing import BlockHash, HashContext, init_none_hash
from explorer.core.kv_cache_manager import KVCacheManager
from explorer.core.kv_cache_utils import get_request_block_hasher, hash_block_tokens
from explorer.core.request import Request, RequestStatus
from explorer.errors import BadInput, read_user_file

TRACE_BLOCK_TOKENS = 512  # Mooncake: one hash id per 512 prompt tokens
MAX_MODEL_LEN = 1 << 20  # the engine's max_model_len: input + output must fit
MAX_HASH_ID = 1 << 32  # hash ids are below this (tokens stay below 2**41)
MAX_TRACE_BYTES = 256 << 20  # the command line's cap on a trace file
UI_MAX_TRACE_BYTES = 32 << 20  # the web page's cap on an upload
MAX_NUM_BLOCKS = 1 << 23  # a pool of 8.4M blocks is about 1 GB of block objects
UI_MAX_NUM_BLOCKS = 1 << 21  # the web page's share of a small shared server
UI_MAX_BLOCKS_HASHED = 8_000_000  # prompt blocks a page job may hash (the shipped trace at 16: 3.8M)
POLICIES = ("vllm", "lru", "unbounded")
DEFAULT_DECODE_MS = 20.0

# progress(fraction done in [0, 1], what is running)
ProgressFn = Callable[[float, str], None]


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


# ---- the trace ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TraceRequest:
    line: int  # 1-based line in the file
    timestamp: float  # ms
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...]  # only the ids the prompt reaches


@dataclass(frozen=True)
class RequestTrace:
    source: str
    requests: tuple[TraceRequest, ...]

    @property
    def prompt_tokens(self) -> int:
        return sum(r.input_length for r in self.requests)


def _field_int(where: str, obj: dict, name: str, lo: int) -> int:
    if name not in obj:
        raise BadInput(f"{where}: missing field {name!r}")
    v = obj[name]
    if type(v) is not int:
        raise BadInput(f"{where}: {name} must be an integer, got {json.dumps(v)[:40]}")
    if v < 0:
        raise BadInput(f"{where}: {name} is negative ({v})")
    if v < lo:
        raise BadInput(f"{where}: {name} is {v}; it must be at least {lo}")
    return v


def _parse_line(where: str, line_no: int, text: str) -> TraceRequest:
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise BadInput(f"{where}: not JSON ({e})") from None
    if not isinstance(obj, dict):
        raise BadInput(f"{where}: expected a JSON object, got {type(obj).__name__}")
    if "timestamp" not in obj:
        raise BadInput(f"{where}: missing field 'timestamp'")
    ts = obj["timestamp"]
    if type(ts) not in (int, float) or not math.isfinite(ts) or ts < 0:
        raise BadInput(f"{where}: timestamp must be a non-negative number (ms), got {json.dumps(ts)[:40]}")
    input_length = _field_int(where, obj, "input_length", 1)
    output_length = _field_int(where, obj, "output_length", 0)
    if "hash_ids" not in obj:
        raise BadInput(f"{where}: missing field 'hash_ids'")
    ids = obj["hash_ids"]
    if not isinstance(ids, list) or not ids:
        raise BadInput(f"{where}: hash_ids must be a non-empty list of integers")
    for k, h in enumerate(ids):
        if type(h) is not int or not 0 <= h < MAX_HASH_ID:
            raise BadInput(f"{where}: hash_ids[{k}] must be an integer in [0, 2**32), got {json.dumps(h)[:40]}")
    if input_length > TRACE_BLOCK_TOKENS * len(ids):
        raise BadInput(
            f"{where}: input_length {input_length} is beyond its {len(ids)} hash ids "
            f"({len(ids)} x {TRACE_BLOCK_TOKENS} = {TRACE_BLOCK_TOKENS * len(ids)} tokens)"
        )
    if input_length + output_length > MAX_MODEL_LEN:
        raise BadInput(
            f"{where}: input_length + output_length = {input_length + output_length} is above "
            f"the engine's max_model_len {MAX_MODEL_LEN}"
        )
    needed = cdiv(input_length, TRACE_BLOCK_TOKENS)
    return TraceRequest(
        line_no, float(ts) if type(ts) is float else ts, input_length, output_length, tuple(ids[:needed])
    )


def parse_trace_bytes(
    data: bytes, source: str = "trace", limit: int | None = None, max_bytes: int = MAX_TRACE_BYTES
) -> RequestTrace:
    """Parse a Mooncake-format trace; bad input raises `BadInput` naming the line.

    Blank lines are ignored. With ``limit`` only the first ``limit`` requests are read (and
    checked).
    """
    if len(data) > max_bytes:
        raise BadInput(f"{source}: {len(data):,} bytes is more than the {max_bytes:,}-byte limit for a trace")
    if b"\x00" in data:
        raise BadInput(f"{source}: not a text file (it contains NUL bytes); expected JSON lines")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BadInput(f"{source}: not a UTF-8 text file (byte {e.start}); expected JSON lines") from None
    if text.startswith("\ufeff"):
        text = text[1:]
    requests: list[TraceRequest] = []
    for line_no, line in enumerate(text.split("\n"), start=1):
        if limit is not None and len(requests) >= limit:
            break
        if not line.strip():
            continue
        requests.append(_parse_line(f"{source} line {line_no}", line_no, line))
    if not requests:
        raise BadInput(f"{source}: empty trace (no request lines)")
    return RequestTrace(source, tuple(requests))


def load_trace(path: str | Path, limit: int | None = None, max_bytes: int = MAX_TRACE_BYTES) -> RequestTrace:
    p = Path(path)
    data = read_user_file(p, "trace file", max_bytes)
    return parse_trace_bytes(data, p.name, limit, max_bytes)


def shipped_trace_path() -> Path:
    """The synthetic Mooncake trace shipped with the project (data/, see its README)."""
    return Path(__file__).resolve().parent.parent / "data" / "mooncake_synthetic_trace.jsonl"


# ---- expansion and hashing ------------------------------------------------------------------


def expand_tokens(hash_ids: Sequence[int], start: int, end: int) -> list[int]:
    """Tokens at positions [start, end) of the expansion of ``hash_ids``."""
    out: list[int] = []
    pos = start
    while pos < end:
        i, j = divmod(pos, TRACE_BLOCK_TOKENS)
        stop = min(end, (i + 1) * TRACE_BLOCK_TOKENS)
        base = hash_ids[i] * TRACE_BLOCK_TOKENS
        out.extend(range(base + j, base + j + (stop - pos)))
        pos = stop
    return out


def expand_prompt(req: TraceRequest) -> list[int]:
    """The prompt: the first ``input_length`` tokens of the expansion."""
    out: list[int] = []
    for h in req.hash_ids:
        base = h * TRACE_BLOCK_TOKENS
        out.extend(range(base, base + TRACE_BLOCK_TOKENS))
    del out[req.input_length :]
    return out


def footprint_tokens(req: TraceRequest, outputs: bool) -> int:
    """Slots a request holds at its largest: the prompt, plus every output token but the last
    (which is sampled and never computed)."""
    extra = req.output_length - 1 if outputs and req.output_length > 0 else 0
    return req.input_length + extra


def is_skipped(req: TraceRequest, block_size: int, num_blocks: int, outputs: bool) -> bool:
    return cdiv(footprint_tokens(req, outputs), block_size) > num_blocks - 1


class PromptHasher:
    """Block hashes of trace prompts, each distinct 512-token trace block hashed once.

    A trace block is identified by the chain of ids that reaches it (a trie node); the blocks
    of ``block_size`` tokens *ending* inside it depend only on that chain, so they are
    memoized per node. Any block size works, including ones that do not divide 512.
    """

    def __init__(self, block_size: int, ctx: HashContext) -> None:
        self.block_size = block_size
        self.ctx = ctx
        # (parent node, hash id) -> (node, hashes of the blocks ending in this trace block)
        self._memo: dict[tuple[int, int], tuple[int, tuple[BlockHash, ...]]] = {}
        self.blocks_hashed = 0

    def _hash_blocks(self, hash_ids: Sequence[int], hashes: list[BlockHash], first: int, stop: int) -> list[BlockHash]:
        bs = self.block_size
        ctx = self.ctx
        parent = hashes[-1] if hashes else None
        out = []
        if stop <= first:
            return out
        tokens = expand_tokens(hash_ids, first * bs, stop * bs)
        for off in range(0, len(tokens), bs):
            parent = hash_block_tokens(ctx, parent, tokens[off : off + bs], None)
            out.append(parent)
        self.blocks_hashed += stop - first
        return out

    def prompt_hashes(self, req: TraceRequest) -> list[BlockHash]:
        bs = self.block_size
        memo = self._memo
        ids = req.hash_ids
        n_full = req.input_length // bs
        hashes: list[BlockHash] = []
        node = 0
        for i, h in enumerate(ids):
            tb_end = (i + 1) * TRACE_BLOCK_TOKENS
            entry = memo.get((node, h))
            if tb_end <= req.input_length:
                if entry is None:
                    entry = (len(memo) + 1, tuple(self._hash_blocks(ids, hashes, len(hashes), tb_end // bs)))
                    memo[(node, h)] = entry
                node = entry[0]
                hashes.extend(entry[1])
            else:  # the prompt ends inside this trace block
                need = n_full - len(hashes)
                if need > 0:
                    if entry is not None:
                        hashes.extend(entry[1][:need])
                    else:
                        hashes.extend(self._hash_blocks(ids, hashes, len(hashes), n_full))
                break
        return hashes


class _PrecomputedBlockHasher:
    """A request block hasher that hands a new request its precomputed prompt hashes, and
    hashes later blocks (output tokens) with the core's own request hasher."""

    def __init__(self, block_size: int, ctx: HashContext) -> None:
        self._real = get_request_block_hasher(block_size, ctx)
        self.pending: list[BlockHash] | None = None

    def __call__(self, request: Request) -> list[BlockHash]:
        if self.pending is not None:
            hashes, self.pending = self.pending, None
            return hashes
        return self._real(request)


def output_block_hashes(
    req: TraceRequest, prompt_hashes: Sequence[BlockHash], block_size: int, ctx: HashContext
) -> list[BlockHash]:
    """Hashes of the blocks that ``--outputs`` fills and the engine caches: full blocks within
    the prompt followed by ``output_length - 1`` zeros (the last sampled token is pending),
    past the prompt's full blocks. Used by the simulators; the engine hashes them itself."""
    total = footprint_tokens(req, True)
    n_full = total // block_size
    first = len(prompt_hashes)
    if n_full <= first:
        return []
    start = first * block_size
    tail = expand_tokens(req.hash_ids, start, req.input_length) + [0] * (total - req.input_length)
    parent = prompt_hashes[-1] if prompt_hashes else None
    out = []
    for k in range(n_full - first):
        parent = hash_block_tokens(ctx, parent, tail[k * block_size : (k + 1) * block_size], None)
        out.append(parent)
    return out


@dataclass
class PreparedTrace:
    """A trace with every request's prompt block hashes (and, for ``outputs``, the hashes of
    the output blocks the simulators need): computed once, shared by every run."""

    trace: RequestTrace
    block_size: int
    outputs: bool
    ctx: HashContext
    prompt_hashes: list[list[BlockHash]]
    output_hashes: list[list[BlockHash]] | None
    seconds: float
    blocks_hashed: int


def prepare(
    trace: RequestTrace,
    block_size: int,
    outputs: bool = False,
    need_output_hashes: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> PreparedTrace:
    if not isinstance(block_size, int) or block_size < 1:
        raise BadInput(f"block size must be a positive integer, got {block_size!r}")
    t0 = time.perf_counter()
    ctx = init_none_hash("sha256", None)
    hasher = PromptHasher(block_size, ctx)
    n = len(trace.requests)
    prompt_hashes = []
    for k, req in enumerate(trace.requests):
        prompt_hashes.append(hasher.prompt_hashes(req))
        if progress is not None and k % 64 == 63:
            progress(k + 1, n)
    output_hashes = None
    if outputs and need_output_hashes:
        output_hashes = [
            output_block_hashes(req, ph, block_size, ctx) for req, ph in zip(trace.requests, prompt_hashes)
        ]
    if progress is not None:
        progress(n, n)
    return PreparedTrace(
        trace, block_size, outputs, ctx, prompt_hashes, output_hashes, time.perf_counter() - t0, hasher.blocks_hashed
    )


# ---- runs -----------------------------------------------------------------------------------


@dataclass
class RunResult:
    policy: str
    num_blocks: int | None  # None: unbounded
    requests: int
    skipped: int
    prompt_tokens: int
    hit_tokens: int
    seconds: float
    hits: list[int] = field(repr=False)  # hit tokens per request (0 when skipped)
    concurrency: dict[str, Any] | None = None

    @property
    def hit_rate(self) -> float:
        return self.hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    def as_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "policy": self.policy,
            "num_blocks": self.num_blocks,
            "skipped": self.skipped,
            "hit_tokens": self.hit_tokens,
            "hit_rate": self.hit_rate,
            "seconds": round(self.seconds, 4),
        }
        if self.concurrency is not None:
            d["concurrency"] = self.concurrency
        return d


def _check_num_blocks(num_blocks: int, max_blocks: int = MAX_NUM_BLOCKS) -> None:
    if not isinstance(num_blocks, int) or num_blocks < 2:
        raise BadInput(f"num_blocks must be an integer >= 2 (block 0 is the null block), got {num_blocks!r}")
    if num_blocks > max_blocks:
        raise BadInput(f"num_blocks {num_blocks:,} is more than the limit of {max_blocks:,} blocks")


def _tick(progress: Callable[[int], None] | None, k: int) -> None:
    if progress is not None and k % 32 == 31:
        progress(k + 1)


def _new_manager(prep: PreparedTrace, num_blocks: int) -> KVCacheManager:
    return KVCacheManager(
        num_blocks,
        prep.block_size,
        max_model_len=MAX_MODEL_LEN,
        enable_caching=True,
        enable_kv_cache_events=False,
        log_stats=True,
    )


def _arrive(prep: PreparedTrace, k: int, hasher: _PrecomputedBlockHasher) -> Request:
    req = prep.trace.requests[k]
    # The Request copies the prompt; its hasher hands it the precomputed hashes (a copy:
    # the request extends its own list with output blocks).
    hasher.pending = list(prep.prompt_hashes[k])
    return Request(str(k), expand_prompt(req), block_hasher=hasher)


def _admit(mgr: KVCacheManager, request: Request) -> int | None:
    """A fresh request's admission, as the scheduler does it: lookup, allocate_slots for the
    whole rest of the prompt, then the stats. The hit in tokens, or None when there was no
    room (nothing changed)."""
    hit_blocks, hit = mgr.get_computed_blocks(request)
    if mgr.allocate_slots(request, request.num_tokens - hit, hit, hit_blocks) is None:
        return None
    request.num_computed_tokens = request.num_tokens
    request.status = RequestStatus.RUNNING
    mgr.record_prefix_cache_stats(request, hit)
    return hit


def _generate(mgr: KVCacheManager, request: Request, n: int) -> None:
    """``n`` output tokens of 0: each step computes the pending token, then samples one; the
    last sampled token stays pending."""
    for _ in range(n):
        pending = request.num_tokens - request.num_computed_tokens
        if pending:
            if mgr.allocate_slots(request, pending) is None:
                raise AssertionError("decode allocation failed although the request's footprint fits")
            request.num_computed_tokens += pending
        request.append_output_token_ids(0)


def _finish(mgr: KVCacheManager, request: Request) -> None:
    mgr.free(request)
    request.status = RequestStatus.FINISHED


def replay_vllm(prep: PreparedTrace, num_blocks: int, progress: Callable[[int], None] | None = None) -> RunResult:
    """The default policy through the real engine: one request at a time, in file order."""
    _check_num_blocks(num_blocks)
    t0 = time.perf_counter()
    mgr = _new_manager(prep, num_blocks)
    hasher = _PrecomputedBlockHasher(prep.block_size, prep.ctx)
    requests = prep.trace.requests
    bs, outputs = prep.block_size, prep.outputs
    hits = [0] * len(requests)
    skipped = 0
    for k, tr in enumerate(requests):
        if is_skipped(tr, bs, num_blocks, outputs):
            skipped += 1
            continue
        request = _arrive(prep, k, hasher)
        hit = _admit(mgr, request)
        if hit is None:
            raise AssertionError(f"request on line {tr.line} did not fit although it is not skipped")
        hits[k] = hit
        if outputs:
            _generate(mgr, request, tr.output_length)
        _finish(mgr, request)
        _tick(progress, k)
    stats = mgr.prefix_cache_stats
    assert stats is not None and stats.hits == sum(hits)
    return RunResult(
        "vllm",
        num_blocks,
        len(requests),
        skipped,
        prep.trace.prompt_tokens,
        stats.hits,
        time.perf_counter() - t0,
        hits,
    )


def replay_vllm_plain(trace: RequestTrace, block_size: int, num_blocks: int, outputs: bool = False) -> RunResult:
    """`replay_vllm` without the shared hashes: every Request is hashed in full by the core's
    request block hasher when it is built, as in a real engine (and as vLLM's side of the
    benchmark does). Same hits; slower. For benchmarks and checks."""
    _check_num_blocks(num_blocks)
    if not isinstance(block_size, int) or block_size < 1:
        raise BadInput(f"block size must be a positive integer, got {block_size!r}")
    t0 = time.perf_counter()
    ctx = init_none_hash("sha256", None)
    hasher = get_request_block_hasher(block_size, ctx)
    mgr = KVCacheManager(
        num_blocks,
        block_size,
        max_model_len=MAX_MODEL_LEN,
        enable_caching=True,
        enable_kv_cache_events=False,
        log_stats=True,
    )
    hits = [0] * len(trace.requests)
    skipped = 0
    for k, tr in enumerate(trace.requests):
        if is_skipped(tr, block_size, num_blocks, outputs):
            skipped += 1
            continue
        request = Request(str(k), expand_prompt(tr), block_hasher=hasher)
        hit = _admit(mgr, request)
        assert hit is not None
        hits[k] = hit
        if outputs:
            _generate(mgr, request, tr.output_length)
        _finish(mgr, request)
    stats = mgr.prefix_cache_stats
    assert stats is not None
    return RunResult(
        "vllm",
        num_blocks,
        len(trace.requests),
        skipped,
        trace.prompt_tokens,
        stats.hits,
        time.perf_counter() - t0,
        hits,
    )


@dataclass(frozen=True)
class ConcurrencyConfig:
    decode_ms: float = DEFAULT_DECODE_MS  # ms per output token


def replay_concurrent(
    prep: PreparedTrace,
    num_blocks: int,
    config: ConcurrencyConfig = ConcurrencyConfig(),
    progress: Callable[[int], None] | None = None,
) -> RunResult:
    """Concurrency from the timestamps, through the real engine.

    The policy (a simple model, not vLLM's scheduler loop):
    - A request arrives at its ``timestamp`` (ms) and joins a FIFO waiting queue (arrivals
      with equal timestamps in file order).
    - Whenever the head of the queue can be admitted, it is: lookup, ``allocate_slots`` for the
      whole prompt, stats, exactly as in the default policy. If it cannot (no room) it waits,
      and so does everyone behind it (first come, first served, as vLLM's FCFS scheduler),
      until a running request finishes and frees its blocks. A waiting request is looked up
      again at each attempt, so it can hit blocks cached while it waited.
    - With ``--outputs`` a request is admitted only if its whole footprint (prompt plus every
      output token but the last) fits, and its output tokens are generated right away; so a
      running request never needs preempting. Without ``--outputs`` it holds its prompt blocks.
    - It runs for ``output_length * decode_ms`` ms, holding its blocks (other requests can hit
      them meanwhile), then finishes and frees them (finishes before arrivals at equal times).
    Skipped requests (the skip rule) never enter the queue.
    Reported: peak running requests, mean and largest queueing delay, the time the last
    request finished.
    """
    _check_num_blocks(num_blocks)
    t0 = time.perf_counter()
    mgr = _new_manager(prep, num_blocks)
    hasher = _PrecomputedBlockHasher(prep.block_size, prep.ctx)
    requests = prep.trace.requests
    bs, outputs = prep.block_size, prep.outputs
    single = mgr.single_type_managers[0]
    hits = [0] * len(requests)
    order = sorted(range(len(requests)), key=lambda k: requests[k].timestamp)
    arrivals = [k for k in order if not is_skipped(requests[k], bs, num_blocks, outputs)]
    skipped = len(requests) - len(arrivals)
    waiting: list[int] = []  # FIFO of request indices; the head is waiting[w_head]
    w_head = 0
    # Only the head of the queue is built as a Request (its prompt expanded): a long queue
    # must not hold every waiting prompt. Its hashes are precomputed, so when it is built
    # changes nothing.
    head: Request | None = None
    running: list[tuple[float, int, Request]] = []  # heap of (finish time, k, request)
    waits: list[float] = []
    peak_running = 0
    done = 0
    last_finish = 0.0
    a = 0
    now = 0.0
    while a < len(arrivals) or w_head < len(waiting) or running:
        # the next event time: a finish or an arrival
        candidates = []
        if running:
            candidates.append(running[0][0])
        if a < len(arrivals):
            candidates.append(float(requests[arrivals[a]].timestamp))
        if candidates:
            now = max(now, min(candidates))
        while running and running[0][0] <= now:
            _, _, request = heapq.heappop(running)
            _finish(mgr, request)
            done += 1
            _tick(progress, done - 1)
        while a < len(arrivals) and requests[arrivals[a]].timestamp <= now:
            waiting.append(arrivals[a])
            a += 1
        while w_head < len(waiting):
            k = waiting[w_head]
            tr = requests[k]
            if head is None:
                head = _arrive(prep, k, hasher)
            request = head
            if outputs:
                hit_blocks, hit = mgr.get_computed_blocks(request)
                need = single.get_num_blocks_to_allocate(
                    request.request_id, footprint_tokens(tr, True), hit_blocks.blocks[0]
                )
                if need > mgr.block_pool.get_num_free_blocks():
                    break
            got = _admit(mgr, request)
            if got is None:
                if not running:
                    raise AssertionError(f"request on line {tr.line} does not fit in an idle engine")
                break
            w_head += 1
            head = None
            hits[k] = got
            if outputs:
                _generate(mgr, request, tr.output_length)
            waits.append(now - tr.timestamp)
            finish_at = now + tr.output_length * config.decode_ms
            heapq.heappush(running, (finish_at, k, request))
            last_finish = max(last_finish, finish_at)
            peak_running = max(peak_running, len(running))
        if w_head > 4096 and w_head * 2 > len(waiting):
            del waiting[:w_head]
            w_head = 0
    stats = mgr.prefix_cache_stats
    assert stats is not None and stats.hits == sum(hits)
    conc = {
        "decode_ms": config.decode_ms,
        "peak_running": peak_running,
        "mean_wait_ms": round(sum(waits) / len(waits), 3) if waits else 0.0,
        "max_wait_ms": round(max(waits), 3) if waits else 0.0,
        "last_finish_ms": round(last_finish, 3),
    }
    return RunResult(
        "vllm",
        num_blocks,
        len(requests),
        skipped,
        prep.trace.prompt_tokens,
        stats.hits,
        time.perf_counter() - t0,
        hits,
        conc,
    )


def _cached_hashes(prep: PreparedTrace, k: int) -> list[BlockHash]:
    """The hashes of the blocks the engine caches for request k: its prompt's full blocks,
    then (with outputs) the full blocks of its output."""
    ph = prep.prompt_hashes[k]
    if prep.outputs:
        assert prep.output_hashes is not None
        return ph + prep.output_hashes[k]
    return ph


def _prefix_hit(hashes: Sequence[BlockHash], cache, cap_blocks: int) -> int:
    n = 0
    for h in hashes[:cap_blocks]:
        if h not in cache:
            break
        n += 1
    return n


def simulate_lru(prep: PreparedTrace, num_blocks: int, progress: Callable[[int], None] | None = None) -> RunResult:
    """NOT vLLM: plain LRU over block hashes, recency in token order (see the module doc).

    The cache holds ``num_blocks - 1`` blocks. A request occupies ``cdiv(footprint,
    block_size)`` of them while it runs, its full blocks cached and the partial tail not;
    the least recently used blocks of other requests are evicted to make room.
    """
    _check_num_blocks(num_blocks)
    t0 = time.perf_counter()
    bs, outputs = prep.block_size, prep.outputs
    capacity = num_blocks - 1
    cache: OrderedDict[BlockHash, None] = OrderedDict()
    requests = prep.trace.requests
    hits = [0] * len(requests)
    skipped = 0
    for k, tr in enumerate(requests):
        if is_skipped(tr, bs, num_blocks, outputs):
            skipped += 1
            continue
        own = _cached_hashes(prep, k)
        hit = _prefix_hit(own, cache, (tr.input_length - 1) // bs)
        hits[k] = hit * bs
        move = cache.move_to_end
        for h in own:
            if h in cache:
                move(h)
            else:
                cache[h] = None
        unhashed = cdiv(footprint_tokens(tr, outputs), bs) - len(own)
        while len(cache) > capacity - unhashed:
            cache.popitem(last=False)
        _tick(progress, k)
    return RunResult(
        "lru",
        num_blocks,
        len(requests),
        skipped,
        prep.trace.prompt_tokens,
        sum(hits),
        time.perf_counter() - t0,
        hits,
    )


def simulate_unbounded(prep: PreparedTrace, progress: Callable[[int], None] | None = None) -> RunResult:
    """NOT vLLM: an infinite cache; every block ever cached stays, no request is skipped."""
    t0 = time.perf_counter()
    bs = prep.block_size
    cache: set[BlockHash] = set()
    requests = prep.trace.requests
    hits = [0] * len(requests)
    for k, tr in enumerate(requests):
        own = _cached_hashes(prep, k)
        hits[k] = _prefix_hit(own, cache, (tr.input_length - 1) // bs) * bs
        cache.update(own)
        _tick(progress, k)
    return RunResult(
        "unbounded",
        None,
        len(requests),
        0,
        prep.trace.prompt_tokens,
        sum(hits),
        time.perf_counter() - t0,
        hits,
    )


# ---- a sweep: sizes x policies, hashing once ------------------------------------------------


@dataclass
class SweepResult:
    block_size: int
    outputs: bool
    requests: int
    prompt_tokens: int
    hash_seconds: float
    blocks_hashed: int
    runs: list[RunResult]
    timestamps: list[float] = field(repr=False)
    prompt_lengths: list[int] = field(repr=False)

    @property
    def seconds(self) -> float:
        return self.hash_seconds + sum(r.seconds for r in self.runs)

    @property
    def tokens_per_s(self) -> float:
        """Prompt tokens replayed per second over the whole sweep (hashing included)."""
        s = self.seconds
        return self.prompt_tokens * len(self.runs) / s if s > 0 else 0.0


def parse_sizes(text: str) -> list[int]:
    """ "1000,5000, 20000" -> [1000, 5000, 20000]; each an integer >= 2, no duplicates."""
    sizes = []
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        try:
            v = int(part.replace("_", ""))
        except ValueError:
            raise BadInput(f"cache sizes: {part!r} is not an integer") from None
        if v < 2:
            raise BadInput(f"cache sizes: {v} is too small (at least 2 blocks: block 0 is the null block)")
        if v in sizes:
            raise BadInput(f"cache sizes: {v} is listed twice")
        sizes.append(v)
    if not sizes:
        raise BadInput("cache sizes: no size given")
    if len(sizes) > 64:
        raise BadInput(f"cache sizes: {len(sizes)} sizes is more than 64")
    return sizes


def run_sweep(
    trace: RequestTrace,
    block_size: int,
    sizes: Sequence[int],
    policies: Sequence[str] = ("vllm",),
    outputs: bool = False,
    concurrency: ConcurrencyConfig | None = None,
    progress: ProgressFn | None = None,
    max_num_blocks: int = MAX_NUM_BLOCKS,
    max_blocks_hashed: int | None = None,
) -> SweepResult:
    """Every policy at every size (unbounded once), with the block hashes computed once.
    ``max_blocks_hashed`` bounds the work: the prompts' full blocks at this block size."""
    for p in policies:
        if p not in POLICIES:
            raise BadInput(f"unknown policy {p!r}: expected one of {', '.join(POLICIES)}")
    if concurrency is not None and any(p != "vllm" for p in policies):
        raise BadInput("concurrency is modelled for the vllm policy only (lru and unbounded are sequential)")
    if not sizes:
        raise BadInput("no cache size given")
    for s in sizes:
        _check_num_blocks(s, max_num_blocks)
    if not isinstance(block_size, int) or block_size < 1:
        raise BadInput(f"block size must be a positive integer, got {block_size!r}")
    if max_blocks_hashed is not None:
        total = sum(r.input_length // block_size for r in trace.requests)
        if total > max_blocks_hashed:
            raise BadInput(
                f"{total:,} prompt blocks at block size {block_size} is more than the {max_blocks_hashed:,} "
                "allowed here: use a larger block size or fewer requests"
            )
    n = len(trace.requests)
    plan: list[tuple[str, int | None]] = []
    for p in policies:
        if p == "unbounded":
            plan.append((p, None))
        else:
            plan.extend((p, s) for s in sizes)
    units = n * (1 + len(plan))  # hashing counts as one pass

    def report(done_units: int, what: str) -> None:
        if progress is not None:
            progress(min(done_units / units, 1.0), what)

    report(0, "hashing")
    need_out = outputs and any(p != "vllm" for p in policies)
    prep = prepare(trace, block_size, outputs, need_out, lambda d, t: report(d, f"hashing: {d:,}/{t:,} requests"))
    runs: list[RunResult] = []
    for idx, (policy, size) in enumerate(plan):
        base = n * (1 + idx)
        label = f"{policy} @ {size:,} blocks" if size is not None else policy
        tick = lambda d, base=base, label=label: report(base + d, f"{label}: {d:,}/{n:,} requests")  # noqa: E731
        tick(0)
        if policy == "vllm":
            if concurrency is not None:
                runs.append(replay_concurrent(prep, size, concurrency, tick))  # type: ignore[arg-type]
            else:
                runs.append(replay_vllm(prep, size, tick))  # type: ignore[arg-type]
        elif policy == "lru":
            runs.append(simulate_lru(prep, size, tick))  # type: ignore[arg-type]
        else:
            runs.append(simulate_unbounded(prep, tick))
    report(units, "done")
    return SweepResult(
        block_size,
        outputs,
        n,
        trace.prompt_tokens,
        prep.seconds,
        prep.blocks_hashed,
        runs,
        [r.timestamp for r in trace.requests],
        [r.input_length for r in trace.requests],
    )


def sweep_to_dict(sweep: SweepResult, per_request: bool = False) -> dict[str, Any]:
    d: dict[str, Any] = {
        "block_size": sweep.block_size,
        "requests": sweep.requests,
        "prompt_tokens": sweep.prompt_tokens,
        "outputs": sweep.outputs,
        "tokens_per_s": round(sweep.tokens_per_s, 1),
        "hash_seconds": round(sweep.hash_seconds, 4),
        "results": [r.as_dict() for r in sweep.runs],
    }
    if per_request:
        d["timestamps"] = sweep.timestamps
        d["prompt_lengths"] = sweep.prompt_lengths
        for r, out in zip(sweep.runs, d["results"]):
            out["hits"] = r.hits
    return d


# ---- worker process (the web page runs sweeps in one) ----------------------------------------
#
# The page starts `python -m explorer.trace_replay` as a fresh interpreter, writes one JSON job
# on its stdin and reads JSON lines from its stdout. (multiprocessing's spawn would re-run the
# Streamlit app script, the parent's __main__, inside the worker before the job.)


def sweep_job(job: dict[str, Any], emit: Callable[[dict[str, Any]], None]) -> None:
    """Run one sweep, emitting {"progress": fraction, "text": ...} messages, then {"result":
    sweep dict} or {"error": message}. ``job``: trace_b64 (base64 of an upload) or trace_path,
    source, limit, max_bytes, block_size, sizes, policies, outputs, decode_ms (None:
    sequential)."""
    last = [0.0]

    def progress(frac: float, what: str) -> None:
        now = time.monotonic()
        if now - last[0] >= 0.2 or frac >= 1.0:
            last[0] = now
            emit({"progress": frac, "text": what})

    try:
        max_bytes = int(job.get("max_bytes", UI_MAX_TRACE_BYTES))
        if job.get("trace_b64") is not None:
            import base64

            data = base64.b64decode(job["trace_b64"])
            trace = parse_trace_bytes(data, job.get("source", "upload"), job.get("limit"), max_bytes)
        else:
            trace = load_trace(job["trace_path"], job.get("limit"), max_bytes)
        conc = ConcurrencyConfig(float(job["decode_ms"])) if job.get("decode_ms") is not None else None
        sweep = run_sweep(
            trace,
            int(job["block_size"]),
            [int(s) for s in job["sizes"]],
            list(job["policies"]),
            bool(job.get("outputs")),
            conc,
            progress,
            max_num_blocks=int(job.get("max_num_blocks", UI_MAX_NUM_BLOCKS)),
            max_blocks_hashed=job.get("max_blocks_hashed", UI_MAX_BLOCKS_HASHED),
        )
        emit({"result": sweep_to_dict(sweep, per_request=True)})
    except BadInput as e:
        emit({"error": str(e)})
    except MemoryError:
        emit({"error": "out of memory: try fewer requests or a larger block size"})


def worker_main() -> int:
    """stdin: one JSON job; stdout: JSON lines (see `sweep_job`)."""
    out = sys.stdout

    def emit(msg: dict[str, Any]) -> None:
        out.write(json.dumps(msg) + "\n")
        out.flush()

    try:
        job = json.loads(sys.stdin.read())
        if not isinstance(job, dict):
            raise ValueError("the job must be a JSON object")
    except ValueError as e:
        emit({"error": f"bad job: {e}"})
        return 2
    try:
        sweep_job(job, emit)
    except BrokenPipeError:  # the page is gone (server stopped, or the job was dropped)
        return 1
    return 0


# ---- command line -----------------------------------------------------------------------------


class _Progress:
    """Progress on stderr, only when useful: nothing for a run under a second; then a
    carriage-return bar on a terminal, or a line every 10 s otherwise."""

    def __init__(self, stream=None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.t0 = time.monotonic()
        self.last = 0.0
        self.shown = False

    def __call__(self, frac: float, what: str) -> None:
        now = time.monotonic()
        if now - self.t0 < 1.0:
            return
        if self.tty:
            if now - self.last < 0.2 and frac < 1.0:
                return
            bar = "#" * int(frac * 30)
            self.stream.write(f"\r[{bar:<30}] {frac:6.1%} {what[:60]:<60}")
        else:
            if now - self.t0 < 5.0 or now - self.last < 10.0:
                return
            self.stream.write(f"replay: {frac:.0%} {what}\n")
        self.stream.flush()
        self.last = now
        self.shown = True

    def close(self) -> None:
        if self.shown and self.tty:
            self.stream.write("\n")
            self.stream.flush()


def _summary(sweep: SweepResult, source: str, concurrent: bool) -> str:
    lines = [
        f"trace {source}: {sweep.requests:,} requests, {sweep.prompt_tokens:,} prompt tokens; "
        f"block size {sweep.block_size}" + (", with outputs" if sweep.outputs else ""),
    ]
    if concurrent:
        lines.append("concurrency: arrivals at their timestamps, FIFO admission, decode time from output_length")
    lines.append(f"{'policy':<10} {'blocks':>10} {'skipped':>8} {'hit tokens':>14} {'hit rate':>9}")
    for r in sweep.runs:
        blocks = f"{r.num_blocks:,}" if r.num_blocks is not None else "unbounded"
        lines.append(f"{r.policy:<10} {blocks:>10} {r.skipped:>8,} {r.hit_tokens:>14,} {r.hit_rate:>9.2%}")
        if r.concurrency:
            c = r.concurrency
            lines.append(
                f"{'':<10} peak running {c['peak_running']}, mean wait {c['mean_wait_ms']:.1f} ms, "
                f"max wait {c['max_wait_ms']:.1f} ms, last finish {c['last_finish_ms'] / 1000:.1f} s"
            )
    if any(r.policy != "vllm" for r in sweep.runs):
        lines.append("(lru and unbounded are simulators over the block hashes, not vLLM)")
    lines.append(
        f"replay: {sweep.seconds:.2f} s ({sweep.hash_seconds:.2f} s hashing {sweep.blocks_hashed:,} distinct blocks), "
        f"{sweep.tokens_per_s:,.0f} prompt tokens/s"
    )
    return "\n".join(lines)


def cmd_replay(args: argparse.Namespace) -> int:
    trace = load_trace(args.trace, args.limit)
    sizes_text = getattr(args, "num_blocks_list", None)
    sizes = parse_sizes(sizes_text) if sizes_text else [args.num_blocks]
    policy = getattr(args, "policy", None) or "vllm"
    policies = list(POLICIES) if policy == "all" else [policy]
    concurrency = ConcurrencyConfig(args.decode_ms) if getattr(args, "concurrent", False) else None
    progress = _Progress()
    try:
        sweep = run_sweep(trace, args.block_size, sizes, policies, args.outputs, concurrency, progress)
    finally:
        progress.close()
    if args.json:
        if len(sweep.runs) == 1:
            r = sweep.runs[0]
            out: dict[str, Any] = {
                "block_size": sweep.block_size,
                "num_blocks": r.num_blocks if r.num_blocks is not None else sizes[0],
                "requests": sweep.requests,
                "skipped": r.skipped,
                "prompt_tokens": sweep.prompt_tokens,
                "hit_tokens": r.hit_tokens,
                "hit_rate": r.hit_rate,
                "tokens_per_s": round(sweep.tokens_per_s, 1),
            }
            if r.policy != "vllm":
                out["policy"] = r.policy
            if r.concurrency is not None:
                out["concurrency"] = r.concurrency
        else:
            out = sweep_to_dict(sweep)
        sys.stdout.write(json.dumps(out) + "\n")
    else:
        sys.stdout.write(_summary(sweep, trace.source, concurrency is not None) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(worker_main())
