"""Block hashes of trace prompts, each distinct 512-token trace block hashed once per chain.

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

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from explorer.core.hashing import BlockHash, HashContext, init_none_hash
from explorer.core.kv_cache_utils import get_request_block_hasher, hash_block_tokens
from explorer.core.request import Request
from explorer.errors import BadInput
from explorer.traffic.trace import (
    TRACE_BLOCK_TOKENS,
    RequestTrace,
    TraceRequest,
    expand_prompt,
    expand_tokens,
    footprint_tokens,
)


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
        out: list[BlockHash] = []
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


class PrecomputedBlockHasher:
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


def arrive(prep: PreparedTrace, k: int, hasher: PrecomputedBlockHasher, max_tokens: int | None = None) -> Request:
    """Request k of the trace, built with its precomputed prompt hashes (``max_tokens`` for
    the scheduler, which stops it there)."""
    req = prep.trace.requests[k]
    # The Request copies the prompt; its hasher hands it the precomputed hashes (a copy:
    # the request extends its own list with output blocks).
    hasher.pending = list(prep.prompt_hashes[k])
    return Request(str(k), expand_prompt(req), block_hasher=hasher, max_tokens=max_tokens)
