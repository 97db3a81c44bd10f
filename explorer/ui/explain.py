"""What a step did, in plain sentences built from its numbers, with vLLM 0.31.0 references.

Pure functions of a `Trace` step (no Streamlit): the explorer page renders what they return,
and tests read it. Each panel names the vLLM function and its file:line in release 0.31.0
(from the behaviour spec), and says in two or three sentences what happened and why.
"""

from __future__ import annotations

from dataclasses import dataclass

from explorer.scenario_cli import id_ranges
from explorer.trace import Step, Trace


@dataclass(frozen=True)
class Ref:
    func: str
    loc: str  # repo-relative path:lines in vLLM 0.31.0

    def __str__(self) -> str:
        return f"{self.func} ({self.loc})"


_KCU = "vllm/v1/core/kv_cache_utils.py"
_BP = "vllm/v1/core/block_pool.py"
_KCM = "vllm/v1/core/kv_cache_manager.py"
_STM = "vllm/v1/core/single_type_kv_cache_manager.py"

REFS: dict[str, Ref] = {
    "request_init": Ref("Request.__init__ runs the block hasher", "vllm/v1/request.py:225-231"),
    "append_output": Ref("Request.append_output_token_ids -> update_block_hashes", "vllm/v1/request.py:272-288"),
    "block_hasher": Ref("get_request_block_hasher", f"{_KCU}:836-895"),
    "hash_block_tokens": Ref("hash_block_tokens", f"{_KCU}:684-714"),
    "none_hash": Ref("init_none_hash / NONE_HASH", f"{_KCU}:104-172"),
    "extra_keys": Ref("generate_block_hash_extra_keys", f"{_KCU}:614-652"),
    "event_hash": Ref("maybe_convert_block_hash", f"{_KCU}:96-99"),
    "get_computed_blocks": Ref("KVCacheManager.get_computed_blocks", f"{_KCM}:264-321"),
    "hit_cap": Ref("max_cache_hit_length = num_tokens - 1", f"{_KCM}:295"),
    "find_longest_cache_hit": Ref("FullAttentionManager.find_longest_cache_hit", f"{_STM}:747-843"),
    "allocate_slots": Ref("KVCacheManager.allocate_slots", f"{_KCM}:371-614"),
    "admission_check": Ref("allocate_slots admission check", f"{_KCM}:558-576"),
    "blocks_to_allocate": Ref("get_num_blocks_to_allocate", f"{_STM}:178-268"),
    "touch": Ref("BlockPool.touch", f"{_BP}:755-771"),
    "get_new_blocks": Ref("BlockPool.get_new_blocks", f"{_BP}:669-703"),
    "cache_full_blocks": Ref("BlockPool.cache_full_blocks", f"{_BP}:226-344"),
    "tokens_to_cache": Ref("num_tokens_to_cache = min(computed + new, num_tokens)", f"{_KCM}:608-612"),
    "hash_map": Ref("BlockHashToBlockMap (duplicates kept)", f"{_BP}:35-133"),
    "free": Ref("SingleTypeKVCacheManager.free", f"{_STM}:562-589"),
    "free_blocks": Ref("BlockPool.free_blocks", f"{_BP}:777-808"),
    "evict": Ref("BlockPool._maybe_evict_cached_block", f"{_BP}:732-753"),
    "map_pop": Ref("BlockHashToBlockMap.pop", f"{_BP}:101-127"),
    "reset": Ref("BlockPool.reset_prefix_cache", f"{_BP}:830-869"),
    "reset_running": Ref(
        "the scheduler preempts its running queue from the end", "vllm/v1/core/sched/scheduler.py:2794-2804"
    ),
    "record_stats": Ref("record_prefix_cache_stats (at admission)", "vllm/v1/core/sched/scheduler.py:1252-1256"),
    "prefix_cache_stats": Ref("PrefixCacheStats", "vllm/v1/metrics/stats.py:116-143"),
    "caching_metrics": Ref("CachingMetrics (window of ~1000 requests)", "vllm/v1/metrics/stats.py:35-113"),
    "null_block": Ref("BlockPool.__init__ takes block 0 as the null block", f"{_BP}:157-196"),
}

PANEL_TITLES = {
    "hashing": "Hashing",
    "lookup": "Lookup",
    "allocate": "Touch, then allocate",
    "caching": "Caching",
    "free": "Free",
    "eviction": "Eviction",
}
PANEL_ORDER = ("hashing", "lookup", "allocate", "caching", "free", "eviction")


@dataclass(frozen=True)
class Panel:
    key: str  # one of PANEL_ORDER
    number: int  # 1..6
    title: str
    refs: tuple[Ref, ...]
    sentences: tuple[str, ...]
    summary: str  # a few words for the phase strip

    @property
    def text(self) -> str:
        return " ".join(self.sentences)


@dataclass(frozen=True)
class Now:
    headline: str  # "admit B1"
    refs: tuple[Ref, ...]
    sentences: tuple[str, ...]

    @property
    def text(self) -> str:
        return " ".join(self.sentences)


def _n(count: int, word: str, plural: str | None = None) -> str:
    return f"{count:,} {word if count == 1 else (plural or word + 's')}"


def _blocks(count: int) -> str:
    return _n(count, "block")


def _ids(ids) -> str:
    ids = list(ids)
    if not ids:
        return "none"
    return id_ranges(ids)[1:-1]


def _req(trace: Trace, k: int, rid: str | None):
    """The request's view after step k, or (if it finished) before it."""
    if rid is None:
        return None
    snap = trace.snapshot_at(k)
    r = snap.request(rid)
    if r is None and k > 0:
        r = trace.snapshot_at(k - 1).request(rid)
    return r


def _tail_words(n: int, bs: int) -> str:
    tail = n % bs
    if tail == 0:
        return f"no partial tail ({n:,} is a multiple of {bs})"
    return f"a partial tail of {_n(tail, 'token')} that gets no hash"


def _extra_sentence(step: Step) -> str | None:
    op = step.op
    parts = []
    if op.lora is not None:
        parts.append(
            f"the LoRA {op.lora.name!r} is an extra key of every block, so none of these hashes equals the base model's"
        )
    if op.cache_salt:
        parts.append(
            f"cache_salt {op.cache_salt!r} is an extra key of block 0 only, and since every later hash chains through block 0 the whole chain differs from an unsalted one"
        )
    for m in op.mm:
        touched = [h.index for h in step.hashed if h.start < m.offset + m.length and m.offset < h.end]
        where = f"block{'s' if len(touched) != 1 else ''} {_ids(touched)}" if touched else "no full block"
        parts.append(f"image {m.id!r} (tokens {m.offset}-{m.offset + m.length - 1}) is an extra key of {where}")
    if not parts:
        return None
    s = "; ".join(parts)
    return s[0].upper() + s[1:] + "."


def hashing_panel(trace: Trace, k: int) -> Panel | None:
    step = trace.steps[k - 1]
    op = step.op
    eng = trace.scenario.engine
    bs = eng.block_size
    refs_arrive = (REFS["request_init"], REFS["block_hasher"], REFS["hash_block_tokens"])
    if op.op == "arrive":
        n = len(op.prompt)
        full = n // bs
        if not eng.enable_prefix_caching:
            return Panel(
                "hashing",
                1,
                PANEL_TITLES["hashing"],
                (REFS["request_init"],),
                (
                    f"{op.id} arrives with {_n(n, 'token')}, {_blocks(full)} of {bs} when full.",
                    "Prefix caching is off, so vLLM builds no block hasher: the request carries no block hashes, nothing is looked up and nothing is cached.",
                ),
                "no hasher",
            )
        s = [f"{op.id} has {_n(n, 'token')}: {_blocks(full)} of {bs} tokens and {_tail_words(n, bs)}."]
        if full:
            s.append(
                f"Each full block is hashed as hash_fn((parent hash, its {bs} token ids, extra keys)) with {eng.hash_algo}; "
                f"block 0's parent is NONE_HASH, so block {full - 1}'s hash stands for all {full * bs:,} tokens up to its end."
            )
        else:
            s.append("No block is full, so nothing is hashed: this request can neither hit the cache nor be hit.")
        extra = _extra_sentence(step)
        if extra:
            s.append(extra)
        elif op.prompt_logprobs:
            s.append(
                "prompt_logprobs is set: the hashes exist, but the lookup will be skipped because every prompt token must be computed."
            )
        elif full:
            s.append("KV events publish each digest's last 8 bytes as a 64-bit integer (the event form below).")
        refs = refs_arrive + (REFS["none_hash"],) + ((REFS["extra_keys"],) if extra else ()) + (REFS["event_hash"],)
        return Panel("hashing", 1, PANEL_TITLES["hashing"], refs, tuple(s), f"{full} hashed")
    if op.op in ("sample", "generate") and step.hashed:
        req = _req(trace, k, op.id)
        n = req.num_tokens if req else 0
        idx = [h.index for h in step.hashed]
        toks = len(op.tokens) if isinstance(op.tokens, tuple) else 0
        s = [
            f"{_n(toks, 'output token')} took {op.id} to {_n(n, 'token')}, and {_blocks(len(idx))} became full: block{'s' if len(idx) > 1 else ''} {_ids(idx)} got {'their hashes' if len(idx) > 1 else 'its hash'}.",
            f"The hasher runs again each time a token is appended and continues the chain from block {idx[0] - 1}'s hash; a hash exists before any KV is computed, and the block is cached only when allocate_slots covers it.",
        ]
        return Panel(
            "hashing",
            1,
            PANEL_TITLES["hashing"],
            (REFS["append_output"], REFS["block_hasher"], REFS["hash_block_tokens"]),
            tuple(s),
            f"{len(idx)} hashed",
        )
    return None


def lookup_panel(trace: Trace, k: int) -> Panel | None:
    step = trace.steps[k - 1]
    lk = step.lookup
    if lk is None:
        return None
    rid = step.op.id
    bs = trace.scenario.engine.block_size
    refs = (REFS["get_computed_blocks"], REFS["hit_cap"], REFS["find_longest_cache_hit"])
    if lk.skipped:
        return Panel(
            "lookup",
            2,
            PANEL_TITLES["lookup"],
            (REFS["get_computed_blocks"],),
            (
                f"No lookup for {rid}: {lk.skipped}.",
                f"get_computed_blocks returns no blocks and 0 hit tokens, so all {_n(lk.num_tokens, 'token')} will be computed.",
            ),
            "skipped",
        )
    hits = sum(1 for _, hit, _ in lk.probes if hit)
    missed = any(not hit for _, hit, _ in lk.probes)
    s = [
        f"get_computed_blocks walks {rid}'s block hashes from block 0 and may look at (num_tokens - 1) // block_size = "
        f"({lk.num_tokens:,} - 1) // {bs} = {_blocks(lk.cap_blocks)}: the last token must be computed to give logits."
    ]
    if lk.cap_blocks == 0:
        s.append("That is no block at all, so the hit is 0 tokens.")
    elif missed and hits == 0:
        s.append("Block 0 missed, and every later hash chains through it, so the walk stops there: hit = 0 tokens.")
    elif missed:
        s.append(
            f"Blocks 0-{hits - 1} hit and block {hits} missed; every later hash chains through the missing one, so the walk stops at the first miss: "
            f"hit = {hits} x {bs} = {lk.hit_tokens:,} tokens."
        )
    else:
        s.append(
            f"{('Both blocks' if hits == 2 else 'All ' + _blocks(hits)) if hits > 1 else 'The one block'} it may look at hit, so the walk ends at the cap: hit = {hits} x {bs} = {lk.hit_tokens:,} tokens"
            + (
                f"; the other {_n(lk.num_tokens - lk.hit_tokens, 'token')} are computed even if more of them are cached."
                if lk.num_tokens - lk.hit_tokens > 0
                else "."
            )
        )
    s.append("The lookup only reads the hash map: no ref_cnt changes until allocate_slots succeeds.")
    return Panel("lookup", 2, PANEL_TITLES["lookup"], refs, tuple(s), f"hit {lk.hit_tokens:,}")


def allocate_panel(trace: Trace, k: int) -> Panel | None:
    step = trace.steps[k - 1]
    if not step.admissions:
        return None
    op = step.op
    rid = op.id
    new_ids = list(step.new_block_ids or ())
    refs = (
        REFS["allocate_slots"],
        REFS["admission_check"],
        REFS["blocks_to_allocate"],
        REFS["touch"],
        REFS["get_new_blocks"],
    )
    s: list[str] = []
    if op.op == "admit":
        a = step.admissions[0]
        verdict = "<=" if a.ok else ">"
        s.append(
            f"allocate_slots needs {_n(a.new_blocks_needed, 'new block')} for tokens up to {a.slots_needed:,} plus "
            f"{_n(a.free_hit_blocks, 'hit block')} waiting in the free queue: {a.new_blocks_needed:,} + {a.free_hit_blocks:,} = {a.required:,} "
            f"{verdict} {a.free_blocks:,} free, so it {'succeeds' if a.ok else 'returns None'}."
        )
        if not a.ok:
            s.append(f"Nothing is touched or allocated: {rid} keeps its state and waits for blocks to be freed.")
            return Panel("allocate", 3, PANEL_TITLES["allocate"], refs[:3], tuple(s), "no room")
        if op.tokens is not None:
            s[-1] = s[-1][:-1] + f" (a chunk of {_n(a.num_new_tokens, 'token')}: chunked prefill)."
    else:
        allocs = len(step.admissions)
        grew = sum(1 for a in step.admissions if a.ok and a.new_blocks_needed > 0)
        if op.op == "decode":
            s.append(
                f"allocate_slots gives the pending token{'s' if (step.admissions[0].num_new_tokens > 1) else ''} a slot; "
                + (
                    f"{_n(len(new_ids), 'new block')} {'was' if len(new_ids) == 1 else 'were'} needed because the request's last block was full."
                    if new_ids
                    else "the last block still had room, so no new block was needed."
                )
            )
        else:
            s.append(
                f"{_n(allocs, 'decode step')} each called allocate_slots for the pending token; "
                f"{grew} of them needed a new block because the request's last block was full."
            )
        if not step.ok:
            s.append(
                "The last call found no free block and returned None: generation stops there (there is no implicit preemption)."
            )
    if step.touched:
        from_free = len(step.touched_from_free)
        shared = len(step.touched) - from_free
        parts = []
        if from_free:
            parts.append(f"{from_free:,} left the free queue (ref_cnt 0 -> 1)")
        if shared:
            parts.append(
                f"{shared} {'was' if shared == 1 else 'were'} in use by another request and {'is' if shared == 1 else 'are'} now shared"
            )
        s.append(
            f"touch() first adds 1 to the ref_cnt of the {_n(len(step.touched), 'hit block')}: "
            + " and ".join(parts)
            + "."
        )
    if new_ids:
        ev = len(step.evicted)
        s.append(
            f"Only then does get_new_blocks pop {_n(len(new_ids), 'block')} from the head of the free queue: {_ids(new_ids)}"
            + (f"; {ev} of them still had a hash and lost it (panel 6)." if ev else ".")
        )
    elif op.op == "admit":
        s.append("No new block was needed.")
    summary = f"{len(new_ids)} new" + (f", {len(step.touched)} touched" if step.touched else "")
    return Panel("allocate", 3, PANEL_TITLES["allocate"], refs, tuple(s), summary)


def caching_panel(trace: Trace, k: int) -> Panel | None:
    step = trace.steps[k - 1]
    if not step.cached:
        return None
    op = step.op
    bs = trace.scenario.engine.block_size
    req = _req(trace, k, op.id)
    idx = [c.index for c in step.cached]
    refs = (REFS["tokens_to_cache"], REFS["cache_full_blocks"], REFS["hash_map"])
    s: list[str] = []
    if op.op == "admit" and step.admissions and req is not None:
        a = step.admissions[0]
        t = min(a.num_computed_tokens + a.num_new_tokens, req.num_tokens)
        full = t // bs
        s.append(
            f"After this step {op.id} will have min(num_computed_tokens + num_new_tokens, num_tokens) = "
            f"min({a.num_computed_tokens:,} + {a.num_new_tokens:,}, {req.num_tokens:,}) = {t:,} tokens, so "
            + (f"its first {_blocks(full)} are full." if full != 1 else "its first block is full.")
        )
        before = idx[0]
        many = len(idx) > 1
        earlier = "block 0" if before == 1 else f"blocks 0-{before - 1}"
        how = "were hits and are cached already" if step.lookup is not None else "were cached by earlier chunks"
        if before == 1:
            how = how.replace("were", "was").replace("are", "is")
        s.append(
            f"Block{'s' if many else ''} {_ids(idx)} get{'' if many else 's'} {'their hashes' if many else 'its hash'} now, at allocation time, "
            f"before the model computes {'them' if many else 'it'}" + (f"; {earlier} {how}." if before > 0 else ".")
        )
    else:
        s.append(
            f"As decoding allocated slots, {_blocks(len(idx))} filled up: block{'s' if len(idx) > 1 else ''} {_ids(idx)} of {op.id} "
            f"{'were' if len(idx) > 1 else 'was'} cached by the allocate_slots call that covered {'their' if len(idx) > 1 else 'its'} last token "
            "(min(computed + new, num_tokens): a block is cached once every token in it is being computed)."
        )
    dups = [c for c in step.cached if c.duplicate_of]
    if dups:
        pairs = ", ".join(f"#{c.block_id} = #{'/#'.join(map(str, c.duplicate_of))}" for c in dups[:4])
        s.append(
            f"{_n(len(dups), 'block')} had an identical cached twin ({pairs}{', ...' if len(dups) > 4 else ''}): vLLM does not de-duplicate, "
            "so the hash map now lists both blocks under one hash, and each will send its own BlockRemoved."
        )
    else:
        stored = sum(1 for e in step.events if type(e).__name__ == "BlockStored")
        if stored:
            s.append(
                f"{_n(stored, 'BlockStored event')} announce{'s' if stored == 1 else ''} the new hashes, with the parent hash and the token ids they cover."
            )
    return Panel("caching", 4, PANEL_TITLES["caching"], refs, tuple(s), f"{len(idx)} cached")


def free_panel(trace: Trace, k: int) -> Panel | None:
    step = trace.steps[k - 1]
    if not step.freed:
        return None
    op = step.op
    front = [f.block_id for f in step.freed if f.to == "front"]
    back = [f.block_id for f in step.freed if f.to == "back"]
    held = [f.block_id for f in step.freed if f.to == "held"]
    refs = (REFS["free"], REFS["free_blocks"])
    who = op.id if op.op != "reset" else ", ".join(step.preempted)
    s = []
    if op.op == "finish":
        s.append(
            f"free({who}) hands back its {_blocks(len(step.freed))} in reverse order (last block first), and each ref_cnt drops by 1."
        )
    else:
        s.append(
            f"{who} {'is' if len(step.preempted) == 1 else 'are'} preempted: the blocks are freed as on finish, in reverse order, "
            "num_computed_tokens goes back to 0, and the next admission looks the cache up again."
        )
    parts = []
    if front:
        parts.append(
            f"{_n(len(front), 'block')} without a hash ({_ids(front)}) go{'es' if len(front) == 1 else ''} to the front of the free queue, to be reused first"
        )
    if back:
        parts.append(
            f"{_n(len(back), 'hashed block')} ({_ids(back)}) go{'es' if len(back) == 1 else ''} to the back in this order, so a chain's last block is evicted before its first"
        )
    if parts:
        s.append("; ".join(parts)[0].upper() + "; ".join(parts)[1:] + ".")
    if held:
        s.append(
            f"{_n(len(held), 'block')} ({_ids(held)}) {'is' if len(held) == 1 else 'are'} still used by another request (ref_cnt > 0) and stay out of the queue."
        )
    else:
        s.append("Freeing sends no event: the hashes stay valid until a block is popped again.")
    summary = f"{len(step.freed)} freed"
    return Panel("free", 5, PANEL_TITLES["free"], refs, tuple(s), summary)


def eviction_panel(trace: Trace, k: int) -> Panel | None:
    step = trace.steps[k - 1]
    op = step.op
    if op.op == "reset":
        prev = trace.snapshot_at(k - 1)
        refs = (REFS["reset"],) + ((REFS["reset_running"],) if op.running else ())
        if step.ok:
            s = [
                f"reset_prefix_cache() succeeded because only the null block was in use: all {_n(len(prev.cached), 'cached hash', 'cached hashes')} are dropped at once.",
                "One AllBlocksCleared event replaces the per-block BlockRemoved events, and the free queue keeps its order.",
            ]
            summary = "cache cleared"
        else:
            used = sum(1 for i, (rc, _) in enumerate(step.snapshot.blocks) if i and rc > 0)
            s = [
                f"reset_prefix_cache() refused: {_blocks(used)} {'is' if used == 1 else 'are'} still in use, so nothing is dropped and it returns False.",
                "Finish (or preempt, with running = true) every request first.",
            ]
            summary = "reset refused"
        if op.running and step.preempted:
            s.insert(
                0,
                f"With running = true the running requests were preempted first, the last to start first: {', '.join(step.preempted)}.",
            )
        return Panel("eviction", 6, PANEL_TITLES["eviction"], refs, tuple(s), summary)
    if not step.evicted:
        return None
    still = {h for h, _ in step.snapshot.cached}
    gone = [b for b, h in step.evicted if h not in still]
    dup = [b for b, h in step.evicted if h in still]
    removed = sum(1 for e in step.events if type(e).__name__ == "BlockRemoved")
    s = [
        f"get_new_blocks popped {_n(len(step.evicted), 'block')} that still had a hash ({_ids(b for b, _ in step.evicted)}); "
        f"{'each' if len(step.evicted) > 1 else 'it'} loses its hash before it is reused, because its old KV is about to be overwritten.",
        f"Each eviction sends one BlockRemoved: {_n(removed, 'event')} this step.",
    ]
    if dup and not gone:
        s.append(
            f"{'Each of these hashes is' if len(dup) > 1 else 'This hash is'} still cached in another block (a duplicate), so the hash map only lost one copy and lookups still hit."
        )
    elif dup:
        s.append(
            f"{_n(len(gone), 'hash', 'hashes')} left the hash map; for {len(dup)} only one copy of a duplicate is gone and another block still serves the hash."
        )
    else:
        s.append(
            f"Their {_n(len(gone), 'entry', 'entries')} left the hash map: a later request with the same prefix misses there."
        )
    return Panel(
        "eviction",
        6,
        PANEL_TITLES["eviction"],
        (REFS["get_new_blocks"], REFS["evict"], REFS["map_pop"]),
        tuple(s),
        f"{len(step.evicted)} evicted",
    )


_BUILDERS = {
    "hashing": hashing_panel,
    "lookup": lookup_panel,
    "allocate": allocate_panel,
    "caching": caching_panel,
    "free": free_panel,
    "eviction": eviction_panel,
}


def panels(trace: Trace, k: int) -> list[Panel]:
    """The panels of step k (1-based), in reading order; only those whose step happened."""
    if k <= 0:
        return []
    out = []
    for key in PANEL_ORDER:
        p = _BUILDERS[key](trace, k)
        if p is not None:
            out.append(p)
    return out


def now(trace: Trace, k: int) -> Now:
    """The NOW line: the op, the vLLM call it stands for, and what it did, in numbers."""
    n_steps = len(trace.steps)
    if k <= 0:
        snap = trace.initial
        sc = trace.scenario
        return Now(
            "before step 1",
            (REFS["null_block"],),
            (
                f"An empty pool of {sc.engine.num_blocks:,} blocks of {sc.engine.block_size} tokens: block 0 is the null block, "
                f"so {snap.num_free_blocks:,} blocks wait in the free queue, in id order.",
                f"The scenario has {_n(n_steps, 'step')}; step forward to watch them.",
            ),
        )
    step = trace.steps[k - 1]
    op = step.op
    snap = step.snapshot
    prev = trace.snapshot_at(k - 1)
    rid = op.id
    headline = f"{op.op} {rid}" if rid is not None else ("reset (running = true)" if op.running else "reset")
    new = len(step.new_block_ids or ())
    if op.op == "arrive":
        n = len(op.prompt)
        bs = trace.scenario.engine.block_size
        full = n // bs if trace.scenario.engine.enable_prefix_caching else 0
        refs = (REFS["request_init"], REFS["block_hasher"])
        s = [
            f"{rid} arrives with {_n(n, 'token')}"
            + (
                f" ({op.text and 'typed text, ' or ''}{_blocks(full)} hashed, {_tail_words(n, bs)})."
                if trace.scenario.engine.enable_prefix_caching
                else "; prefix caching is off, so it gets no block hashes."
            )
        ]
        s.append("Nothing touches the pool yet: a request gets blocks only when it is admitted.")
    elif op.op == "admit":
        refs = (REFS["get_computed_blocks"], REFS["allocate_slots"])
        a = step.admissions[0] if step.admissions else None
        req = _req(trace, k, rid)
        n = req.num_tokens if req else 0
        if step.ok:
            hit = step.hit_tokens or 0
            s = [
                (
                    f"{rid} hits {hit:,} of its {n:,} tokens"
                    if step.lookup and not step.lookup.skipped
                    else f"{rid} continues its prefill"
                    if step.lookup is None
                    else f"{rid} skips the lookup"
                )
                + f" and gets {_n(new, 'new block')}; the free queue goes from {prev.num_free_blocks:,} to {snap.num_free_blocks:,} blocks."
            ]
            if a is not None:
                s.append(
                    f"Admission check: {a.new_blocks_needed:,} new + {a.free_hit_blocks:,} free hit blocks = {a.required:,} <= {a.free_blocks:,} free."
                )
        else:
            s = (
                [
                    f"{rid} does not fit: {a.new_blocks_needed:,} new + {a.free_hit_blocks:,} free hit blocks = {a.required:,} > {a.free_blocks:,} free, so allocate_slots returns None and nothing changes."
                ]
                if a
                else [f"{rid} could not be admitted."]
            )
    elif op.op in ("generate", "decode"):
        refs = (REFS["allocate_slots"],) + ((REFS["append_output"],) if op.op == "generate" else ())
        toks = len(op.tokens) if isinstance(op.tokens, tuple) else 0
        what = f"{rid} generates {_n(toks, 'token')}" if op.op == "generate" else f"{rid} computes its pending tokens"
        s = [
            f"{what}: {_n(len(step.admissions), 'allocate_slots call')}, {_n(new, 'new block')}, {_n(len(step.cached), 'block')} cached."
        ]
        if not step.ok:
            s.append("An allocation found no free block, so the op stopped there.")
        elif op.op == "generate":
            s.append("The last sampled token stays pending: a request's final token is never computed.")
    elif op.op == "sample":
        refs = (REFS["append_output"],)
        toks = len(op.tokens) if isinstance(op.tokens, tuple) else 0
        made = len(step.hashed)
        s = [
            f"{rid} samples {_n(toks, 'token')}; they are not computed yet, so the pool does not change"
            + (
                f", but {_n(made, 'new block hash', 'new block hashes')} exist{'s' if made == 1 else ''} now."
                if made
                else ", and no block became full, so there is no new hash."
            )
        ]
    elif op.op in ("finish", "preempt"):
        refs = (REFS["free"], REFS["free_blocks"])
        front = sum(1 for f in step.freed if f.to == "front")
        back = sum(1 for f in step.freed if f.to == "back")
        held = sum(1 for f in step.freed if f.to == "held")
        verb = "finishes" if op.op == "finish" else "is preempted"
        if step.freed:
            s = [
                f"{rid} {verb}: {_blocks(len(step.freed))} freed, {front} to the front of the free queue, {back} to the back, {held} still held by others."
            ]
        else:
            s = [f"{rid} {verb} holding no block (it was waiting or preempted), so the pool does not change."]
    else:
        refs = (REFS["reset"],)
        s = []
        if step.preempted:
            s.append(f"First the running requests are preempted, the last to start first: {', '.join(step.preempted)}.")
        s.append(
            "The prefix cache is reset: every hash is dropped."
            if step.ok
            else "reset_prefix_cache() refused: blocks are still in use, so every hash stays."
        )
    if step.events:
        kinds: dict[str, int] = {}
        for e in step.events:
            kinds[type(e).__name__] = kinds.get(type(e).__name__, 0) + 1
        s.append("Events: " + ", ".join(f"{c} {name}" for name, c in kinds.items()) + ".")
    return Now(headline, refs, tuple(s))


def metrics_sentence(trace: Trace, k: int) -> str:
    snap = trace.snapshot_at(k)
    st = snap.stats
    rate = st["hits"] / st["queries"] if st["queries"] else 0.0
    return (
        f"{st['requests']} admitted requests, {st['queries']:,} query tokens, {st['hits']:,} hit tokens: hit rate {rate:.1%}; "
        f"window of the last {snap.window_requests} requests: {snap.window_hit_rate:.1%}."
    )
