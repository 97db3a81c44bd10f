"""The offloading connector's CPU tier (core/sched/kv_connector/cpu_tier.py): vLLM 0.31.0's
CPUOffloadingManager with the LRU policy, and 0.33.0's request-scoped one, driven by hand."""

from __future__ import annotations

from explorer.core.sched.kv_connector.cpu_tier import CPUOffloadingManager, LookupResult, ReqContext


def ctx(name: str, keys: list[bytes]) -> ReqContext:
    c = ReqContext(name)
    for i, k in enumerate(keys):
        c.positions[k] = (i + 1) * 16
    return c


def lru(m: CPUOffloadingManager) -> list[bytes]:
    return [c.key for c in m.lru_order()]


def stored(m: CPUOffloadingManager, c: ReqContext, keys: list[bytes]) -> list[bytes]:
    prepared = m.prepare_store(keys, c)
    assert prepared is not None
    m.complete_store(prepared[0])
    return prepared[1]


def test_a_chunk_being_written_is_a_pending_hit_until_its_store_completes():
    m = CPUOffloadingManager(4, enable_events=True)
    a = ctx("A", [b"a0", b"a1"])
    assert m.prepare_store([b"a0", b"a1"], a) == ([b"a0", b"a1"], [])
    assert m.lookup(b"a0") == LookupResult.HIT_PENDING and m.lookup(b"zz") == LookupResult.MISS
    assert m.take_events() == []
    assert m.complete_store([b"a1", b"a0"]) == [b"a1", b"a0"]
    assert m.lookup(b"a0") == LookupResult.HIT
    (event,) = m.take_events()
    assert event.keys == (b"a1", b"a0") and not event.removed
    assert m.complete_store([b"a0"]) == []  # already written: nothing new


def test_eviction_takes_the_least_recently_used_and_a_finished_request_is_most_recent():
    m = CPUOffloadingManager(4, enable_events=True)
    a, b, c = ctx("A", [b"a0", b"a1"]), ctx("B", [b"b0", b"b1"]), ctx("C", [b"c0", b"c1"])
    stored(m, a, [b"a0", b"a1"])
    assert lru(m) == [b"a0", b"a1"]  # inserted in prefix order: the first block is the LRU one
    m.on_request_finished(a)
    assert lru(m) == [b"a1", b"a0"]  # ranked from the last block back: the first is the MRU
    stored(m, b, [b"b0", b"b1"])
    m.on_request_finished(b)
    m.take_events()
    assert stored(m, c, [b"c0", b"c1"]) == [b"a1", b"a0"]
    removed, added = m.take_events()
    assert removed.removed and removed.keys == (b"a1", b"a0") and added.keys == (b"c0", b"c1")
    assert lru(m) == [b"b1", b"b0", b"c0", b"c1"]
    m.on_request_finished(b)  # once only
    assert lru(m) == [b"b1", b"b0", b"c0", b"c1"]


def test_a_store_larger_than_the_evictable_room_is_refused_whole():
    m = CPUOffloadingManager(4, enable_events=True)
    keys = [b"x%d" % i for i in range(6)]
    assert m.prepare_store(keys, ctx("X", keys)) is None
    assert lru(m) == [] and m.take_events() == []
    a = ctx("A", [b"a0", b"a1", b"a2"])
    stored(m, a, [b"a0", b"a1", b"a2"])
    m.prepare_load([b"a0"], ctx("L", [b"a0"]))  # pinned by a load: not evictable
    assert m.prepare_store([b"y0", b"y1", b"y2", b"y3"], ctx("Y", [b"y0", b"y1", b"y2", b"y3"])) is None
    m.complete_load([b"a0"])
    prepared = m.prepare_store([b"y0", b"y1", b"y2", b"y3"], ctx("Y", [b"y0", b"y1", b"y2", b"y3"]))
    assert prepared is not None and prepared[1] == [b"a0", b"a1", b"a2"]


def test_a_store_never_evicts_its_own_keys_and_skips_what_is_there():
    m = CPUOffloadingManager(2, enable_events=False)
    a = ctx("A", [b"a0", b"a1", b"a2"])
    stored(m, a, [b"a0", b"a1"])
    # a0 is the LRU chunk, but it is one of this store's keys: a1 is evicted instead.
    assert m.prepare_store([b"a0", b"a2"], a) == ([b"a2"], [b"a1"])
    assert m.take_events() == []  # events off


def test_a_load_pins_its_chunks_and_its_request_ranks_them_on_finishing():
    m = CPUOffloadingManager(3, enable_events=True)
    a = ctx("A", [b"a0", b"a1"])
    stored(m, a, [b"a0", b"a1"])
    stored(m, ctx("B", [b"b0"]), [b"b0"])
    assert lru(m) == [b"a0", b"a1", b"b0"]
    d = ctx("D", [b"a0", b"a1"])
    m.prepare_load([b"a0", b"a1"], d)
    assert [c.ref_cnt for c in m.lru_order()] == [1, 1, 0]
    m.complete_load([b"a0", b"a1"])
    m.on_request_finished(d)
    assert lru(m) == [b"b0", b"a1", b"a0"]


def test_reset_forgets_every_chunk_and_chunk_ids_are_reused():
    m = CPUOffloadingManager(2, enable_events=True)
    a = ctx("A", [b"a0", b"a1"])
    stored(m, a, [b"a0", b"a1"])
    assert [c.chunk_id for c in m.lru_order()] == [0, 1]
    m.reset_cache()
    assert lru(m) == [] and m.lookup(b"a0") == LookupResult.MISS
    m.on_request_finished(a)  # its accesses were before the reset: no effect
    stored(m, ctx("B", [b"b0", b"b1"]), [b"b0", b"b1"])
    assert [c.chunk_id for c in m.lru_order()] == [0, 1]
    stored(m, ctx("C", [b"c0"]), [b"c0"])  # evicts b0; its chunk id is reused
    assert [(c.key, c.chunk_id) for c in m.lru_order()] == [(b"b1", 1), (b"c0", 0)]


def test_eviction_always_takes_the_lowest_ranked_evictable_chunks():
    """Random stores, loads and finishes: each eviction is the n least recently used ready,
    unpinned chunks outside the store's keys, as the LRU order (``lru_order``) says."""
    import random

    rng = random.Random(7)
    m = CPUOffloadingManager(12, enable_events=False)
    pinned: list[list[bytes]] = []
    for step in range(3000):
        ctx_keys = [b"k%d" % i for i in rng.sample(range(40), rng.randint(1, 5))]  # a request's keys differ
        c = ctx(f"r{step}", ctx_keys)
        before = m.lru_order()
        prepared = m.prepare_store(ctx_keys, c)
        present = {ch.key for ch in before}
        need = len([k for k in ctx_keys if k not in present]) - (12 - len(before))
        candidates = [ch.key for ch in before if ch.ref_cnt == 0 and ch.key not in ctx_keys]
        if prepared is None:
            assert need > len(candidates)
        else:
            assert prepared[1] == candidates[: max(need, 0)]
            m.complete_store(prepared[0])
        ready = [ch.key for ch in m.lru_order() if ch.ref_cnt >= 0]
        if ready and rng.random() < 0.3:
            keys = rng.sample(ready, min(len(ready), 2))
            m.prepare_load(keys, c)
            pinned.append(keys)
        if pinned and rng.random() < 0.3:
            m.complete_load(pinned.pop(rng.randrange(len(pinned))))
        if rng.random() < 0.5:
            m.on_request_finished(c)


# ---- 0.33.0: request-scoped ranks (request_scoped = True) -----------------------------------


def test_under_0_33_a_request_s_chunks_share_its_rank_tail_first():
    m = CPUOffloadingManager(4, enable_events=True, request_scoped=True)
    a, b = ctx("A", [b"a0", b"a1"]), ctx("B", [b"b0"])
    stored(m, a, [b"a0"])
    stored(m, b, [b"b0"])
    stored(m, a, [b"a1"])  # a later batch of A ranks with A, below B: A took its rank first
    assert lru(m) == [b"a1", b"a0", b"b0"]
    # 0.31.0 ranks each insertion by the counter: the later store is the most recent
    old = CPUOffloadingManager(4, enable_events=True)
    a, b = ctx("A", [b"a0", b"a1"]), ctx("B", [b"b0"])
    stored(old, a, [b"a0"])
    stored(old, b, [b"b0"])
    stored(old, a, [b"a1"])
    assert lru(old) == [b"a0", b"b0", b"a1"]


def test_under_0_33_a_first_access_raises_a_chunk_to_the_reader_s_rank():
    m = CPUOffloadingManager(4, enable_events=True, request_scoped=True)
    a, b = ctx("A", [b"a0", b"a1"]), ctx("B", [b"a0", b"a1"])
    stored(m, a, [b"a0", b"a1"])
    c = ctx("C", [b"c0"])
    stored(m, c, [b"c0"])
    assert lru(m) == [b"a1", b"a0", b"c0"]
    m.prepare_load([b"a0"], b)  # B reads A's first chunk: B's rank, above C's
    m.complete_load([b"a0"])
    assert lru(m) == [b"a1", b"c0", b"a0"]
    # a store offering chunks the tier holds records them too: B's rank at their positions
    assert m.prepare_store([b"a0", b"a1"], b) == ([], [])
    assert lru(m) == [b"c0", b"a1", b"a0"]
    m.on_request_finished(b)  # a finish re-ranks by the counter, head most recent
    assert lru(m) == [b"c0", b"a1", b"a0"]
    assert stored(m, ctx("D", [b"d0", b"d1"]), [b"d0", b"d1"]) == [b"c0"]


def test_under_0_33_a_failed_store_frees_its_chunks_without_a_public_removal():
    m = CPUOffloadingManager(2, enable_events=True, request_scoped=True)
    a = ctx("A", [b"a0", b"a1"])
    assert m.prepare_store([b"a0", b"a1"], a) == ([b"a0", b"a1"], [])
    assert m.complete_store([b"a0", b"a1"], success=False) == []
    assert m.lookup(b"a0") == LookupResult.MISS and lru(m) == []
    (event,) = m.take_events()
    assert event.removed and event.metadata_only and event.keys == (b"a0", b"a1")
    # dropped keys stored again before the events are taken leave the removal
    m.prepare_store([b"a0"], a)
    m.complete_store([b"a0"], success=False)
    stored(m, ctx("B", [b"a0"]), [b"a0"])
    assert [(e.keys, e.metadata_only) for e in m.take_events()] == [((b"a0",), False)]
    assert m.get_stats().cpu_cache_write_usage == 0.0
