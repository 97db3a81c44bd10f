"""The Trace replay page's grid: its inputs checked into one worker job, and one block size's
(and scheduler's) part of a result for the parts of the page that draw one at a time.

The job lists block sizes and schedulers; the worker plans every cell with
`explorer.traffic.ray_sweep.plan_cells`, as `explorer sweep` does.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import Any

from explorer.errors import BadInput
from explorer.traffic.results import UI_MAX_NUM_BLOCKS
from explorer.traffic.scheduled import SCHEDULERS
from explorer.traffic.sweep import UI_MAX_BLOCKS_HASHED, parse_sizes
from explorer.traffic.sweep import parse_block_sizes as parse_block_size_list
from explorer.traffic.trace import UI_MAX_TRACE_BYTES, parse_trace_bytes, shipped_trace_path
from explorer.viz.replay import scheduler_name

UI_MAX_CELLS = 256  # cells one page job runs: each returns every request's hits to the page
UI_MAX_BLOCK_SIZES = 8
UI_MAX_BLOCK_SIZE = 4096


def parse_block_sizes(text: str) -> list[int]:
    """ "16, 32,64" -> [16, 32, 64]: each a whole number of tokens in 1..UI_MAX_BLOCK_SIZE, no
    duplicates, at most UI_MAX_BLOCK_SIZES."""
    return parse_block_size_list(text, UI_MAX_BLOCK_SIZES, UI_MAX_BLOCK_SIZE)


def count_cells(block_sizes: int, sizes: int, policies: Sequence[str], schedulers: int) -> int:
    """The grid's cells, as `plan_cells` plans them (unbounded once per block size)."""
    per_bs = sum(1 if p == "unbounded" else sizes * (schedulers if p == "scheduler" else 1) for p in policies)
    return block_sizes * per_bs


def build_job(
    source_is_upload: bool,
    upload: Any,
    block_sizes_text: str,
    sizes_text: str,
    limit: int,
    policies: list[str],
    outputs: bool,
    schedulers: list[str],
    max_num_batched_tokens: int,
) -> dict[str, Any]:
    """Check the inputs (BadInput on anything wrong: one message) and describe the worker's job."""
    block_sizes = parse_block_sizes(block_sizes_text)
    sizes = parse_sizes(sizes_text)
    if max(sizes) > UI_MAX_NUM_BLOCKS:
        raise BadInput(f"cache sizes: {max(sizes):,} blocks is more than this page's limit of {UI_MAX_NUM_BLOCKS:,}")
    if not policies:
        raise BadInput("pick at least one policy")
    if "scheduler" in policies:
        if not schedulers:
            raise BadInput("pick at least one scheduler (async, sync) for vLLM's scheduler")
        for s in schedulers:
            if s not in SCHEDULERS:
                raise BadInput(f"scheduler must be one of {', '.join(SCHEDULERS)}, got {s!r}")
    else:
        schedulers = ["async"]  # no scheduler cell: the choice is not used
    cells = count_cells(len(block_sizes), len(sizes), policies, len(schedulers))
    if cells > UI_MAX_CELLS:
        raise BadInput(
            f"the grid has {cells:,} cells ({len(block_sizes)} block sizes x cache sizes x policies"
            f"{' x schedulers' if 'scheduler' in policies else ''}); this page runs at most {UI_MAX_CELLS:,}"
        )
    lim = int(limit) or None
    job: dict[str, Any] = {
        "limit": lim,
        "max_bytes": UI_MAX_TRACE_BYTES,
        "block_sizes": block_sizes,
        "sizes": sizes,
        "policies": policies,
        "outputs": outputs,
        "schedulers": list(schedulers),
        "max_num_batched_tokens": int(max_num_batched_tokens),
        "max_num_blocks": UI_MAX_NUM_BLOCKS,
        "max_blocks_hashed": UI_MAX_BLOCKS_HASHED,
        "max_cells": UI_MAX_CELLS,
    }
    if source_is_upload:
        if upload is None:
            raise BadInput("upload a trace first (JSON lines in Mooncake's format)")
        if upload.size > UI_MAX_TRACE_BYTES:
            raise BadInput(f"{upload.name}: {upload.size:,} bytes is more than the {UI_MAX_TRACE_BYTES:,}-byte limit")
        data = upload.getvalue()
        parse_trace_bytes(data, upload.name, lim, UI_MAX_TRACE_BYTES)  # bad input shows at once
        job.update(trace_b64=base64.b64encode(data).decode("ascii"), source=upload.name)
    else:
        job.update(trace_path=str(shipped_trace_path()), source=shipped_trace_path().name)
    return job


def cut(res: Mapping[str, Any], block_size: int, scheduler: str | None) -> dict[str, Any]:
    """The result at one block size (and, of the scheduler cells, one scheduler's): what the
    time plot and the missed-tokens part draw, which show one block size at a time."""
    runs = [
        r
        for r in res["results"]
        if r.get("block_size", res["block_size"]) == block_size
        and (scheduler is None or r["policy"] != "scheduler" or scheduler_name(r) == scheduler)
    ]
    return {**res, "block_size": block_size, "results": runs}
