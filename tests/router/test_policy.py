"""The prefix-aware router's choice on crafted cases (explorer.router.policy)."""

from __future__ import annotations

from collections import Counter

from explorer.core.events import KVEventBatch, encode_batch
from explorer.core.hashing import init_none_hash
from explorer.events.stream import KVEventStream
from explorer.events.wire import live_frames
from explorer.router.policy import PrefixRouter
from explorer.scenario.engine import ScenarioEngine
from explorer.scenario.ops import Admit, Arrive, Finish
from explorer.scenario.spec import EngineConfig, Scenario


def router(bs=4, **kw) -> PrefixRouter:
    return PrefixRouter(bs, init_none_hash("sha256"), "int64", **kw)


def view_of(r: PrefixRouter, tokens, blocks) -> Counter:
    """An instance's published set holding the given block indices of ``tokens``'s chain."""
    keys = r.keys(r.block_hashes(tokens))
    return Counter(keys[i] for i in blocks)


def test_longest_run_wins():
    r = router()
    prompt = list(range(21))  # 5 full blocks of 4; the lookup may cover 5 ((21 - 1) // 4)
    views = [
        view_of(r, prompt, [0, 1]),
        view_of(r, prompt, [0, 1, 2]),
        view_of(r, prompt, [1, 2, 3, 4]),  # no block 0: a run must start at the first block
        None,  # nothing published yet
    ]
    keys, cap = r.request_keys(prompt)
    assert cap == 5
    d = r.choose(keys, cap, views, [0, 0, 0, 0])
    assert d.matches == [2, 3, 0, 0]
    assert d.instance == 1


def test_run_stops_at_first_miss_and_at_the_cap():
    r = router()
    prompt = list(range(16))  # 4 full blocks, but the last token must run: cap 3
    keys, cap = r.request_keys(prompt)
    assert (len(keys), cap) == (4, 3)
    full = view_of(r, prompt, [0, 1, 2, 3])
    holey = view_of(r, prompt, [0, 2, 3])
    assert r.match(keys, full, cap) == 3
    assert r.match(keys, holey, cap) == 1


def test_load_term_and_tie_breaks():
    prompt = list(range(33))
    r = router(load_weight=1.0)
    keys, cap = r.request_keys(prompt)
    views = [view_of(r, prompt, range(6)), view_of(r, prompt, range(3)), None]
    # costs: 8-6+5 = 7, 8-3+1 = 6, 8-0+0 = 8
    d = r.choose(keys, cap, views, [5, 1, 0])
    assert d.costs == [7.0, 6.0, 8.0] and d.instance == 1
    # equal costs: each tie-break
    empty = [None, None, None]
    assert router(tie_break="least_loaded").choose(keys, cap, empty, [2, 0, 1]).instance == 1
    assert router(tie_break="lowest_index").choose(keys, cap, empty, [2, 0, 1]).instance == 0
    rr = router(tie_break="round_robin")
    assert [rr.choose(keys, cap, empty, [0, 0, 0]).instance for _ in range(4)] == [0, 1, 2, 0]
    a = [router(tie_break="random", rng_seed=5).choose(keys, cap, empty, [0, 0, 0]).instance for _ in range(3)]
    b = [router(tie_break="random", rng_seed=5).choose(keys, cap, empty, [0, 0, 0]).instance for _ in range(3)]
    assert a == b


def test_router_hashes_match_an_engines_published_events():
    """An engine caches a prompt; its events, through encode_batch and the subscriber, give the
    router a run over every block the lookup may cover."""
    prompt = tuple(range(100, 150))  # 3 full blocks of 16 + 2 tokens
    eng = ScenarioEngine(Scenario("t", EngineConfig(num_blocks=20), ()), record=False)
    events = []
    for _i, op in enumerate([Arrive(index=0, id="a", prompt=prompt), Admit(index=1, id="a"), Finish(index=2, id="a")]):
        events += eng.apply(op).events
    stream = KVEventStream()
    stream.feed_live(live_frames(b"instance-0", 0, encode_batch(KVEventBatch(1.0, events, 0))), now=0.0)
    view = stream.instances[("instance-0", 0)].hashes
    r = PrefixRouter(16, init_none_hash("sha256"), "int64")
    keys, cap = r.request_keys(prompt)
    assert sum(view.values()) == 3 and all(isinstance(h, int) for h in view)
    assert set(keys[:3]) == set(view)
    assert r.match(keys, view, cap) == 3
    # the same request arriving again hits exactly that
    step = [eng.apply(Arrive(index=3, id="b", prompt=prompt)), eng.apply(Admit(index=4, id="b"))][-1]
    assert step.hit_tokens == 3 * 16
