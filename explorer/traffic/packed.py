"""A prepared trace as a few flat numpy arrays, for Ray's object store.

A sweep parses and hashes the trace once (`hashing.prepare`) and every cell replays it. Ray
moves numpy arrays through its shared-memory object store without pickling each element (a
worker on the same machine maps them, zero copy), while a list of a million `TraceRequest`
objects and tens of millions of digests would be pickled and copied into every task. So the
requests become six integer/float columns and the prompt block hashes one ``(blocks, 32)``
byte matrix with per-request offsets; `unpack` rebuilds the `PreparedTrace` the replay
policies take, so a cell runs exactly the code `replay` runs.
"""

from __future__ import annotations

import numpy as np

from explorer.core.hashing import BlockHash, init_none_hash
from explorer.traffic.hashing import PreparedTrace, output_block_hashes
from explorer.traffic.trace import RequestTrace, TraceRequest

DIGEST = 32  # sha256: the sweep hashes with the default algorithm, as `replay` does

Packed = dict[str, np.ndarray]


def _offsets(lengths: list[int]) -> np.ndarray:
    out = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(np.asarray(lengths, dtype=np.int64), out=out[1:])
    return out


def pack(prep: PreparedTrace) -> Packed:
    """The trace and its prompt hashes as arrays (output hashes are rebuilt where needed)."""
    reqs = prep.trace.requests
    ids = [h for r in reqs for h in r.hash_ids]
    digests = b"".join(h for hs in prep.prompt_hashes for h in hs)
    return {
        "line": np.fromiter((r.line for r in reqs), dtype=np.int64, count=len(reqs)),
        "timestamp": np.fromiter((r.timestamp for r in reqs), dtype=np.float64, count=len(reqs)),
        # an int timestamp stays an int (the scheduler policy's queueing figures print it)
        "timestamp_is_int": np.fromiter((type(r.timestamp) is int for r in reqs), dtype=np.bool_, count=len(reqs)),
        "input_length": np.fromiter((r.input_length for r in reqs), dtype=np.int64, count=len(reqs)),
        "output_length": np.fromiter((r.output_length for r in reqs), dtype=np.int64, count=len(reqs)),
        "id_offsets": _offsets([len(r.hash_ids) for r in reqs]),
        "hash_ids": np.asarray(ids, dtype=np.int64),
        "hash_offsets": _offsets([len(hs) for hs in prep.prompt_hashes]),
        "digests": np.frombuffer(digests, dtype=np.uint8).reshape(-1, DIGEST),
        "meta": np.asarray([prep.block_size, int(prep.outputs), prep.blocks_hashed], dtype=np.int64),
        "hash_seconds": np.asarray([prep.seconds], dtype=np.float64),
    }


def unpack(packed: Packed, source: str, need_output_hashes: bool) -> PreparedTrace:
    """The `PreparedTrace` that `pack` was given (``need_output_hashes``: rebuild the output
    block hashes the lru and unbounded simulators read with ``outputs``)."""
    block_size, outputs, blocks_hashed = (int(v) for v in packed["meta"])
    ts_int = packed["timestamp_is_int"].tolist()
    ts = packed["timestamp"].tolist()
    lines = packed["line"].tolist()
    ins = packed["input_length"].tolist()
    outs = packed["output_length"].tolist()
    ids = packed["hash_ids"].tolist()
    id_off = packed["id_offsets"].tolist()
    requests = tuple(
        TraceRequest(
            lines[k], int(ts[k]) if ts_int[k] else ts[k], ins[k], outs[k], tuple(ids[id_off[k] : id_off[k + 1]])
        )
        for k in range(len(lines))
    )
    buf = packed["digests"].tobytes()
    h_off = packed["hash_offsets"].tolist()
    prompt_hashes = [
        [BlockHash(buf[i * DIGEST : (i + 1) * DIGEST]) for i in range(h_off[k], h_off[k + 1])]
        for k in range(len(requests))
    ]
    ctx = init_none_hash("sha256", None)
    trace = RequestTrace(source, requests)
    output_hashes = None
    if outputs and need_output_hashes:
        output_hashes = [output_block_hashes(r, ph, block_size, ctx) for r, ph in zip(requests, prompt_hashes)]
    return PreparedTrace(
        trace,
        block_size,
        bool(outputs),
        ctx,
        prompt_hashes,
        output_hashes,
        float(packed["hash_seconds"][0]),
        blocks_hashed,
    )
