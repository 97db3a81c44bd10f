"""The offloading connector's lookup over every KV cache group (vLLM 0.31.0's
``_lookup_complete_chunks``, offloading/scheduler.py:749-949; one block per chunk).

The full-attention groups first, each a run of hits from the local hit; then the window
groups, widest first, each the last run of window-many hits before the candidate end. Each
group may lower the hit; a lower hit sends the window groups (or, after a group still being
written, every group) round again, until the hit holds for all. With a window group the hit
ends at least one token short of the request's tokens. Less than one chunk of any group is
no hit; a chunk still being written makes the answer None.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from explorer.core.sched.kv_connector.offload_groups import Lookup, cdiv, prefix_lookup, sliding_window_lookup

if TYPE_CHECKING:
    from explorer.core.sched.kv_connector.offload_groups import OffloadLayout, RequestOffloadState


def lookup_complete_chunks(layout: OffloadLayout, st: RequestOffloadState, lookup: Lookup) -> int | None:
    num_computed = st.num_locally_computed_tokens
    max_hit = st.req.num_tokens
    if layout.window_groups:
        max_hit -= 1  # the last prompt token is computed again for its logits
    num_hit = 0
    deferred = False
    rounds: tuple[int, ...] = layout.lookup_groups
    while rounds:
        looked_up_window = False
        this_round, rounds = rounds, ()
        for g in this_round:
            gc, keys = layout.groups[g], st.groups[g].offload_keys
            tpc = gc.tokens_per_chunk
            max_hit = min(max_hit, len(keys) * tpc)
            if max_hit - num_computed < tpc:
                return 0
            num_chunks = min(cdiv(max_hit, tpc), len(keys))
            start = num_computed // tpc
            candidates = keys[start:num_chunks]
            if gc.window_chunks is None:
                hit_chunks = prefix_lookup(candidates, lookup)
            else:
                initial = gc.load_window_size_in_chunks(min(max_hit, num_chunks * tpc))
                assert initial is not None
                hit_chunks = sliding_window_lookup(candidates, gc.window_chunks, initial, lookup)
            if hit_chunks == 0:
                return 0
            if hit_chunks is None:
                deferred = True
            else:
                max_hit = min(max_hit, tpc * (start + hit_chunks))
            new_hit = max_hit - num_computed
            if new_hit < tpc:
                return 0
            if new_hit < num_hit:
                if deferred:
                    deferred = False
                    rounds = layout.lookup_groups
                elif looked_up_window and not rounds:
                    rounds = layout.window_groups
            looked_up_window |= gc.window_chunks is not None
            num_hit = new_hit
    return None if deferred else num_hit
