"""Replay a Mooncake-format trace through vLLM 0.31.0's own KVCacheManager (the oracle side of
`python -m explorer replay` and of scripts/bench_replay.py).

Runs inside the vLLM virtualenv (``.venv-vllm``, made by tests/conformance/setup_vllm.sh) and
must not import ``explorer``. It applies the same rules as design section 4 (`replay`), default
policy: token j of trace block i is ``hash_ids[i] * 512 + j``; a prompt is the first
``input_length`` tokens; each request in file order arrives (vLLM's Request runs the sha256
block hasher, default seed), is admitted whole (get_computed_blocks, allocate_slots, then
record_prefix_cache_stats, as the scheduler does), with ``--outputs`` generates
``output_length`` tokens of 0 (compute the pending token, then sample; the last stays
pending), and is freed before the next. Skip rule: ``cdiv(input_length + (output_length - 1
if --outputs and output_length > 0 else 0), block_size) > num_blocks - 1``. The trace is
trusted input here (the explorer checks it).

``--hashing plain`` (default): every request's prompt is hashed by vLLM's request block
hasher when the Request is built, as in a real engine. ``--hashing memo``: the block hashes of
each distinct chain of trace ids are computed once with vLLM's ``hash_block_tokens`` and handed
to the Request through its ``block_hasher`` (the same shortcut the explorer takes), so both
sides can be timed doing the same work.

Prints one JSON line on stdout: requests, skipped, prompt_tokens, hit_tokens, hit_rate,
seconds (wall), cpu_seconds, hash_seconds (memo only), tokens_per_s (prompt tokens per wall
second of replay: import and file parsing excluded), and with ``--per-request`` the hit tokens
of every request.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

# vLLM's logger may write to stdout: keep stdout for the one JSON line.
_OUT = os.fdopen(os.dup(1), "w", encoding="utf-8")
os.dup2(2, 1)
sys.stdout = sys.stderr
os.environ.pop("PYTHONHASHSEED", None)  # vLLM's default NONE_HASH seed
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")

import torch  # noqa: E402
from vllm.sampling_params import SamplingParams  # noqa: E402
from vllm.utils.hashing import sha256  # noqa: E402
from vllm.v1.core.kv_cache_manager import KVCacheManager  # noqa: E402
from vllm.v1.core.kv_cache_utils import (  # noqa: E402
    get_request_block_hasher,
    hash_block_tokens,
    init_none_hash,
)
from vllm.v1.kv_cache_interface import (  # noqa: E402
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
)
from vllm.v1.request import Request, RequestStatus  # noqa: E402

TB = 512
MAX_MODEL_LEN = 1 << 20


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def expand(ids, start: int, end: int) -> list[int]:
    out: list[int] = []
    pos = start
    while pos < end:
        i, j = divmod(pos, TB)
        stop = min(end, (i + 1) * TB)
        base = ids[i] * TB
        out.extend(range(base + j, base + j + stop - pos))
        pos = stop
    return out


class MemoHasher:
    """Per distinct chain of trace ids, the hashes of the blocks ending in that trace block."""

    def __init__(self, block_size: int) -> None:
        self.bs = block_size
        self.memo: dict = {}
        self.pending = None
        self.real = get_request_block_hasher(block_size, sha256)

    def _blocks(self, ids, hashes, first, stop):
        parent = hashes[-1] if hashes else None
        out = []
        if stop <= first:
            return out
        bs = self.bs
        tokens = expand(ids, first * bs, stop * bs)
        for off in range(0, len(tokens), bs):
            parent = hash_block_tokens(sha256, parent, tokens[off : off + bs], None)
            out.append(parent)
        return out

    def prompt_hashes(self, ids, input_length: int) -> list:
        bs = self.bs
        n_full = input_length // bs
        hashes: list = []
        node = 0
        for i, h in enumerate(ids):
            end = (i + 1) * TB
            entry = self.memo.get((node, h))
            if end <= input_length:
                if entry is None:
                    entry = (len(self.memo) + 1, tuple(self._blocks(ids, hashes, len(hashes), end // bs)))
                    self.memo[(node, h)] = entry
                node = entry[0]
                hashes.extend(entry[1])
            else:
                need = n_full - len(hashes)
                if need > 0:
                    hashes.extend(
                        entry[1][:need] if entry is not None else self._blocks(ids, hashes, len(hashes), n_full)
                    )
                break
        return hashes

    def __call__(self, request):
        if self.pending is not None:
            out, self.pending = self.pending, None
            return out
        return self.real(request)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--num-blocks", type=int, default=10000)
    ap.add_argument("--limit", type=int)
    ap.add_argument("--outputs", action="store_true")
    ap.add_argument("--hashing", choices=["plain", "memo"], default="plain")
    ap.add_argument("--per-request", action="store_true")
    args = ap.parse_args()
    bs, nb, outputs = args.block_size, args.num_blocks, args.outputs

    reqs = []
    with open(args.trace, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            if args.limit is not None and len(reqs) >= args.limit:
                break
            o = json.loads(line)
            n = o["input_length"]
            reqs.append((n, o["output_length"], o["hash_ids"][: cdiv(n, TB)]))

    init_none_hash(sha256)
    config = KVCacheConfig(
        num_blocks=nb,
        kv_cache_tensors=[],
        kv_cache_groups=[
            KVCacheGroupSpec(
                ["layer.0"],
                FullAttentionSpec(block_size=bs, num_kv_heads=1, head_size=1, dtype=torch.float32),
            )
        ],
    )
    mgr = KVCacheManager(
        config,
        max_model_len=MAX_MODEL_LEN,
        scheduler_block_size=bs,
        hash_block_size=bs,
        enable_caching=True,
        enable_kv_cache_events=False,
        log_stats=True,
    )
    memo = MemoHasher(bs) if args.hashing == "memo" else None
    hasher = memo if memo is not None else get_request_block_hasher(bs, sha256)
    params = SamplingParams(max_tokens=MAX_MODEL_LEN)

    hits = [0] * len(reqs)
    skipped = 0
    hash_s = 0.0
    w0, c0 = time.perf_counter(), time.process_time()
    for k, (n, out_len, ids) in enumerate(reqs):
        footprint = n + (out_len - 1 if outputs and out_len > 0 else 0)
        if cdiv(footprint, bs) > nb - 1:
            skipped += 1
            continue
        prompt: list[int] = []
        for h in ids:
            prompt.extend(range(h * TB, h * TB + TB))
        del prompt[n:]
        if memo is not None:
            t = time.perf_counter()
            memo.pending = memo.prompt_hashes(ids, n)
            hash_s += time.perf_counter() - t
        req = Request(
            request_id=str(k),
            prompt_token_ids=prompt,
            sampling_params=params,
            pooling_params=None,
            block_hasher=hasher,
        )
        blocks, hit, _ = mgr.get_computed_blocks(req)
        new = mgr.allocate_slots(req, req.num_tokens - hit, num_new_computed_tokens=hit, new_computed_blocks=blocks)
        if new is None:
            raise SystemExit(f"request {k} did not fit although it is not skipped")
        mgr.record_prefix_cache_stats(req, hit)
        req.status = RequestStatus.RUNNING
        req.num_computed_tokens = req.num_tokens
        hits[k] = hit
        if outputs:
            for _ in range(out_len):
                pending = req.num_tokens - req.num_computed_tokens
                if pending:
                    if mgr.allocate_slots(req, pending) is None:
                        raise SystemExit(f"request {k}: decode allocation failed")
                    req.num_computed_tokens += pending
                req.append_output_token_ids(0)
        mgr.free(req)
        req.status = RequestStatus.FINISHED_STOPPED
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0

    stats = mgr.prefix_cache_stats
    assert stats.hits == sum(hits)
    prompt_tokens = sum(r[0] for r in reqs)
    result = {
        "block_size": bs,
        "num_blocks": nb,
        "requests": len(reqs),
        "skipped": skipped,
        "prompt_tokens": prompt_tokens,
        "hit_tokens": stats.hits,
        "hit_rate": stats.hits / prompt_tokens if prompt_tokens else 0.0,
        "hashing": args.hashing,
        "seconds": wall,
        "cpu_seconds": cpu,
        "hash_seconds": hash_s if memo is not None else None,
        "tokens_per_s": prompt_tokens / wall if wall > 0 else 0.0,
    }
    if args.per_request:
        result["hits"] = hits
    _OUT.write(json.dumps(result) + "\n")
    _OUT.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
