"""Panels 3 to 6 of a step, what the block pool did: touch then allocate, caching, free, eviction."""

from __future__ import annotations

from explorer.scenario.ops import Admit, Reset
from explorer.scenario.records import AdmissionCheck, CacheCall, CachedBlock, Freed, Lookup, Touched
from explorer.scenario.trace import Trace
from explorer.view.explain.records import PANEL_TITLES, Panel
from explorer.view.explain.refs import REFS
from explorer.view.explain.words import blocks_text, counted, ids_text, indexes_text, new_blocks, request_at


def allocate_panel(trace: Trace, k: int) -> Panel | None:
    step = trace.steps[k - 1]
    checks = step.of(AdmissionCheck)
    if not checks:
        return None
    op = step.op
    rid = op.id
    new_ids = new_blocks(step)
    refs = (
        REFS["allocate_slots"],
        REFS["admission_check"],
        REFS["blocks_to_allocate"],
        REFS["touch"],
        REFS["get_new_blocks"],
    )
    s: list[str] = []
    if isinstance(op, Admit):
        a = checks[0]
        verdict = "<=" if a.ok else ">"
        s.append(
            f"allocate_slots needs {counted(a.num_new_blocks, 'new block')} for tokens up to {a.num_tokens_need_slot:,} plus "
            f"{counted(a.num_evictable_hit_blocks, 'hit block')} waiting in the free queue: {a.num_new_blocks:,} + {a.num_evictable_hit_blocks:,} = {a.num_required_blocks:,} "
            f"{verdict} {a.num_free_blocks:,} free, so it {'succeeds' if a.ok else 'returns None'}."
        )
        if not a.ok:
            s.append(f"Nothing is touched or allocated: {rid} keeps its state and waits for blocks to be freed.")
            return Panel("allocate", 3, PANEL_TITLES["allocate"], refs[:3], tuple(s), "no room")
        if op.tokens is not None:
            s[-1] = s[-1][:-1] + f" (a chunk of {counted(a.num_new_tokens, 'token')}: chunked prefill)."
    else:
        allocs = len(checks)
        grew = sum(1 for a in checks if a.ok and a.num_new_blocks > 0)
        if op.op == "decode":
            s.append(
                f"allocate_slots gives the pending token{'s' if (checks[0].num_new_tokens > 1) else ''} a slot; "
                + (
                    f"{counted(len(new_ids), 'new block')} {'was' if len(new_ids) == 1 else 'were'} needed because the request's last block was full."
                    if new_ids
                    else "the last block still had room, so no new block was needed."
                )
            )
        else:
            s.append(
                f"{counted(allocs, 'decode step')} each called allocate_slots for the pending token; "
                f"{grew} of them needed a new block because the request's last block was full."
            )
        if not step.ok:
            s.append(
                "The last call found no free block and returned None: generation stops there (there is no implicit preemption)."
            )
    touched = step.of(Touched)
    if touched:
        from_free = sum(t.from_free for t in touched)
        shared = len(touched) - from_free
        parts = []
        if from_free:
            parts.append(f"{from_free:,} left the free queue (ref_cnt 0 -> 1)")
        if shared:
            parts.append(
                f"{shared} {'was' if shared == 1 else 'were'} in use by another request and {'is' if shared == 1 else 'are'} now shared"
            )
        s.append(
            f"touch() first adds 1 to the ref_cnt of the {counted(len(touched), 'hit block')}: "
            + " and ".join(parts)
            + "."
        )
    if new_ids:
        ev = len(step.evictions())
        s.append(
            f"Only then does get_new_blocks pop {counted(len(new_ids), 'block')} from the head of the free queue: {ids_text(new_ids)}"
            + (f"; {ev} of them still had a hash and lost it (panel 6)." if ev else ".")
        )
    elif op.op == "admit":
        s.append("No new block was needed.")
    summary = f"{len(new_ids)} new" + (f", {len(touched)} touched" if touched else "")
    return Panel("allocate", 3, PANEL_TITLES["allocate"], refs, tuple(s), summary)


def caching_panel(trace: Trace, k: int) -> Panel | None:
    step = trace.steps[k - 1]
    cached = step.of(CachedBlock)
    if not cached:
        return None
    op = step.op
    bs = trace.scenario.engine.block_size
    req = request_at(trace, k, op.id)
    idx = [c.index for c in cached]
    refs = (REFS["tokens_to_cache"], REFS["cache_full_blocks"], REFS["hash_map"])
    s: list[str] = []
    a = step.first(AdmissionCheck)
    call = step.first(CacheCall)
    if op.op == "admit" and a is not None and call is not None and req is not None:
        t = call.num_tokens  # what allocate_slots passed to cache_blocks (group 0)
        m = min(a.num_computed_tokens + a.num_new_tokens, req.num_tokens)
        groups = trace.scenario.groups
        gbs = bs if groups is None else groups.groups[0].block_size
        full = t // gbs
        s.append(
            f"After this step {op.id} will have min(num_computed_tokens + num_new_tokens, num_tokens) = "
            f"min({a.num_computed_tokens:,} + {a.num_new_tokens:,}, {req.num_tokens:,}) = {m:,} tokens"
            + (f"; cache_blocks gets {t:,} of them for group 0" if t != m else "")
            + ", so "
            + (f"its first {blocks_text(full)} are full." if full != 1 else "its first block is full.")
        )
        before = idx[0]
        many = len(idx) > 1
        earlier = "block 0" if before == 1 else f"blocks 0-{before - 1}"
        how = "were hits and are cached already" if step.last(Lookup) is not None else "were cached by earlier chunks"
        if before == 1:
            how = how.replace("were", "was").replace("are", "is")
        s.append(
            f"Block{'s' if many else ''} {indexes_text(cached, trace.scenario.groups is not None)} get{'' if many else 's'} {'their hashes' if many else 'its hash'} now, at allocation time, "
            f"before the model computes {'them' if many else 'it'}" + (f"; {earlier} {how}." if before > 0 else ".")
        )
    else:
        s.append(
            f"As decoding allocated slots, {blocks_text(len(idx))} filled up: block{'s' if len(idx) > 1 else ''} {indexes_text(cached, trace.scenario.groups is not None)} of {op.id} "
            f"{'were' if len(idx) > 1 else 'was'} cached by the allocate_slots call that covered {'their' if len(idx) > 1 else 'its'} last token "
            "(min(computed + new, num_tokens): a block is cached once every token in it is being computed)."
        )
    dups = [c for c in cached if c.duplicate_of]
    if dups:
        pairs = ", ".join(f"#{c.block_id} = #{'/#'.join(map(str, c.duplicate_of))}" for c in dups[:4])
        s.append(
            f"{counted(len(dups), 'block')} had an identical cached twin ({pairs}{', ...' if len(dups) > 4 else ''}): vLLM does not de-duplicate, "
            "so the hash map now lists both blocks under one hash, and each will send its own BlockRemoved."
        )
    else:
        stored = sum(1 for e in step.events if type(e).__name__ == "BlockStored")
        if stored:
            s.append(
                f"{counted(stored, 'BlockStored event')} announce{'s' if stored == 1 else ''} the new hashes, with the parent hash and the token ids they cover."
            )
    return Panel("caching", 4, PANEL_TITLES["caching"], refs, tuple(s), f"{len(idx)} cached")


def free_panel(trace: Trace, k: int) -> Panel | None:
    step = trace.steps[k - 1]
    freed = step.of(Freed)
    if not freed:
        return None
    op = step.op
    front = [f.block_id for f in freed if f.to == "front"]
    back = [f.block_id for f in freed if f.to == "back"]
    held = [f.block_id for f in freed if f.to == "held"]
    refs = (REFS["free"], REFS["free_blocks"])
    who = op.id if op.op != "reset" else ", ".join(step.preempted)
    s = []
    if op.op == "finish":
        s.append(
            f"free({who}) hands back its {blocks_text(len(freed))} in reverse order (last block first), and each ref_cnt drops by 1."
        )
    else:
        s.append(
            f"{who} {'is' if len(step.preempted) == 1 else 'are'} preempted: the blocks are freed as on finish, in reverse order, "
            "num_computed_tokens goes back to 0, and the next admission looks the cache up again."
        )
    parts = []
    if front:
        parts.append(
            f"{counted(len(front), 'block')} without a hash ({ids_text(front)}) go{'es' if len(front) == 1 else ''} to the front of the free queue, to be reused first"
        )
    if back:
        parts.append(
            f"{counted(len(back), 'hashed block')} ({ids_text(back)}) go{'es' if len(back) == 1 else ''} to the back in this order, so a chain's last block is evicted before its first"
        )
    if parts:
        s.append("; ".join(parts)[0].upper() + "; ".join(parts)[1:] + ".")
    if held:
        s.append(
            f"{counted(len(held), 'block')} ({ids_text(held)}) {'is' if len(held) == 1 else 'are'} still used by another request (ref_cnt > 0) and stay out of the queue."
        )
    else:
        s.append("Freeing sends no event: the hashes stay valid until a block is popped again.")
    summary = f"{len(freed)} freed"
    return Panel("free", 5, PANEL_TITLES["free"], refs, tuple(s), summary)


def eviction_panel(trace: Trace, k: int) -> Panel | None:
    step = trace.steps[k - 1]
    op = step.op
    if isinstance(op, Reset):
        prev = trace.snapshot_at(k - 1)
        refs = (REFS["reset"],) + ((REFS["reset_running"],) if op.running else ())
        if step.ok:
            s = [
                f"reset_prefix_cache() succeeded because only the null block was in use: all {counted(len(prev.cached), 'cached hash', 'cached hashes')} are dropped at once.",
                "One AllBlocksCleared event replaces the per-block BlockRemoved events, and the free queue keeps its order.",
            ]
            summary = "cache cleared"
        else:
            used = sum(1 for i, (rc, _) in enumerate(trace.snapshot_at(k).blocks) if i and rc > 0)
            s = [
                f"reset_prefix_cache() refused: {blocks_text(used)} {'is' if used == 1 else 'are'} still in use, so nothing is dropped and it returns False.",
                "Finish (or preempt, with running = true) every request first.",
            ]
            summary = "reset refused"
        if op.running and step.preempted:
            s.insert(
                0,
                f"With running = true the running requests were preempted first, the last to start first: {', '.join(step.preempted)}.",
            )
        return Panel("eviction", 6, PANEL_TITLES["eviction"], refs, tuple(s), summary)
    evicted = step.evictions()
    if not evicted:
        return None
    still = {h for h, _ in trace.snapshot_at(k).cached}
    gone = [p.block_id for p in evicted if p.evicted_hash not in still]
    dup = [p.block_id for p in evicted if p.evicted_hash in still]
    removed = sum(1 for e in step.events if type(e).__name__ == "BlockRemoved")
    s = [
        f"get_new_blocks popped {counted(len(evicted), 'block')} that still had a hash ({ids_text(p.block_id for p in evicted)}); "
        f"{'each' if len(evicted) > 1 else 'it'} loses its hash before it is reused, because its old KV is about to be overwritten.",
        f"Each eviction sends one BlockRemoved: {counted(removed, 'event')} this step.",
    ]
    if dup and not gone:
        s.append(
            f"{'Each of these hashes is' if len(dup) > 1 else 'This hash is'} still cached in another block (a duplicate), so the hash map only lost one copy and lookups still hit."
        )
    elif dup:
        s.append(
            f"{counted(len(gone), 'hash', 'hashes')} left the hash map; for {len(dup)} only one copy of a duplicate is gone and another block still serves the hash."
        )
    else:
        s.append(
            f"Their {counted(len(gone), 'entry', 'entries')} left the hash map: a later request with the same prefix misses there."
        )
    return Panel(
        "eviction",
        6,
        PANEL_TITLES["eviction"],
        (REFS["get_new_blocks"], REFS["evict"], REFS["map_pop"]),
        tuple(s),
        f"{len(evicted)} evicted",
    )
