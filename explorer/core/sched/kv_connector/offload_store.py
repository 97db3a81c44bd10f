"""Which chunks a store job offers, group by group (vLLM 0.31.0's ``_build_store_jobs``,
offloading/scheduler.py:1501-1643; one block per chunk, no drafter group).

Each group offers its keyed, allocated chunks from where it last stored up to the tokens
offloadable after this batch, but not a chunk whose block is 0 (a window group's null, or a
block the pool gave out again) nor, in a window group, one no later hit can reach
(``reachable_store_mask``). The request's store horizon is its prompt while it prefills, its
last offloadable chunk once finished, none with a retention interval set; a finished window
group whose horizon ended mid-segment looks back to that segment's start for tails it skipped.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from explorer.core.errors import SchedulingError
from explorer.core.sched.kv_connector.cpu_tier import OffloadKey
from explorer.core.sched.kv_connector.offload_groups import reachable_store_mask

if TYPE_CHECKING:
    from explorer.core.sched.kv_connector.offload_groups import OffloadLayout, RequestOffloadState


def store_candidates(
    layout: OffloadLayout, st: RequestOffloadState, num_offloadable: int, prompt_offloadable: int
) -> tuple[list[OffloadKey], list[tuple[int, int]]]:
    """(the keys to offer, in group order; each group's chunk range considered)."""
    req = st.req
    retention, align = layout.retention_interval, layout.alignment_tokens
    boundaries: tuple[int, ...] = ()
    if retention is not None:
        boundaries = (req.num_prompt_tokens - 1,)
        if req.shared_prefix_boundary:
            boundaries += (req.shared_prefix_boundary,)
    keys: list[OffloadKey] = []
    ranges: list[tuple[int, int]] = []
    for gc, gs in zip(layout.groups, st.groups):
        tpc = gc.tokens_per_chunk
        num_chunks = min(num_offloadable // tpc, len(gs.block_ids), len(gs.offload_keys))
        start = gs.next_stored_chunk_idx
        prompt_horizon = prompt_offloadable // tpc
        final_align = None
        if align is not None and gc.sliding_window is not None and align % tpc == 0:
            final_align = align // tpc
        reconsider = (
            req.is_finished() and num_chunks != prompt_horizon and retention is None and final_align is not None
        )
        horizon: int | None
        if retention is not None:
            horizon = None
        elif req.is_finished():
            horizon = num_chunks
        elif num_chunks <= prompt_horizon:
            horizon = prompt_horizon
        else:
            horizon = None
        if reconsider:
            assert final_align is not None
            start = min(start, num_chunks - num_chunks % final_align)
        ranges.append((start, num_chunks))
        if num_chunks <= start:
            continue
        mask = reachable_store_mask(gc, start, num_chunks, align, retention, boundaries, horizon)
        prompt_mask = None
        if reconsider:
            prompt_mask = reachable_store_mask(gc, start, num_chunks, align, retention, boundaries, prompt_horizon)
        for i, (key, block_id) in enumerate(zip(gs.offload_keys[start:num_chunks], gs.block_ids[start:num_chunks])):
            if block_id == 0:
                continue
            if reconsider and start + i < gs.next_stored_chunk_idx and (prompt_mask is None or prompt_mask[i]):
                continue
            if mask is not None and not mask[i]:
                continue
            keys.append(key)
    return keys, ranges


def forget_reallocated(
    states: Iterable[RequestOffloadState],
    window_groups: tuple[int, ...],
    ends: Mapping[str, tuple[int, ...]],
    allocated: set[int],
) -> None:
    """In a window group, a chunk not stored yet whose block the pool handed out again this
    step (it fell below the window and was freed) is forgotten: 0, never stored from. Only the
    blocks known before this step's (``ends``: each window group's length before them, per
    request that got new blocks) are checked (``_update_req_states``, offloading/scheduler.py:1240-1262)."""
    if not (window_groups and allocated):
        return
    for st in states:
        end_of = ends.get(st.req.request_id)
        for i, g in enumerate(window_groups):
            gs = st.groups[g]
            end = end_of[i] if end_of is not None else len(gs.block_ids)
            for j in range(gs.next_stored_chunk_idx, end):
                if gs.block_ids[j] in allocated:
                    gs.block_ids[j] = 0


def store_sources(
    layout: OffloadLayout, st: RequestOffloadState, ranges: Sequence[tuple[int, int]], chosen: set[OffloadKey]
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(the GPU blocks a store job reads, group by group; those of the window groups)."""
    src: list[int] = []
    window: list[int] = []
    for gc, gs, (start, end) in zip(layout.groups, st.groups, ranges):
        ids = [b for k, b in zip(gs.offload_keys[start:end], gs.block_ids[start:end]) if k in chosen]
        src += ids
        if gc.sliding_window is not None:
            window += ids
    return tuple(src), tuple(window)


def check_window_sources(req_id: str, window_block_ids: Sequence[int]) -> None:
    """vLLM watches a store's window-group source blocks, one entry per block id, and forgets
    them when the store completes (``_remove_pending_job``, offloading/scheduler.py:653-658):
    a job that names one block twice makes that forgetting raise KeyError. It happens when
    a reset restarts a request's stores from its first chunk while its window group still
    lists, at a position below the window, a block the pool later gave the same request again
    (the zeroing of ``forget_reallocated`` covers only chunks not stored yet). Refused, as vLLM
    cannot run it."""
    if len(set(window_block_ids)) != len(window_block_ids):
        raise SchedulingError(
            f"request {req_id!r}: a store names one window-group block twice (after a reset with "
            "external, a block freed below the window came back to the same request): vLLM's "
            "offloading connector raises KeyError there"
        )
