"""A healthy fleet through the simulation loop, and asking the router (explorer.router.simulate)."""

from __future__ import annotations

import time

from explorer.router.config import FleetConfig
from explorer.router.simulate import ask, simulate
from explorer.scenario.engine import ScenarioEngine
from explorer.scenario.spec import EngineConfig, Op, Scenario
from tests.router.helpers import SMALL, with_failures


def test_healthy_router_predicts_the_engines_hits(healthy):
    chk = healthy.prediction_check()
    assert chk["over"] == chk["under"] == 0 and chk["exact"] > 0
    assert healthy.predicted > 0
    assert healthy.router_keys_known == healthy.router_keys
    assert healthy.subscriber["gaps"] == healthy.subscriber["lost"] == 0
    assert all(i.phantom == i.missing == 0 for i in healthy.instances)


def test_numbers_are_the_engines_own_stats(stream, healthy):
    routed = {i: [k for k, x in enumerate(healthy.instance_of) if x == i] for i in range(3)}
    for i, inst in enumerate(healthy.instances):
        ks = routed[i]
        assert inst.stats["requests"] == len(ks) == inst.routed
        assert inst.stats["queries"] == sum(len(stream.requests[k].tokens) for k in ks)
        assert inst.stats["hits"] == sum(healthy.hit_tokens[k] for k in ks)
        assert inst.hit_tokens == inst.stats["hits"]
    assert healthy.hits == sum(i.stats["hits"] for i in healthy.instances)
    assert healthy.hit_rate == healthy.hits / healthy.queries


def test_prefix_beats_round_robin_on_the_default_fleet():
    result = simulate(FleetConfig())
    hr = {p: r.hit_rate for p, r in result.runs.items()}
    assert hr["prefix"] > hr["round_robin"] + 0.1
    assert hr["prefix"] > hr["least_loaded"] + 0.1
    assert result.runs["prefix"].saved_ms > result.runs["round_robin"].saved_ms


def test_default_fleet_is_fast():
    t = time.process_time()
    simulate(FleetConfig())
    assert time.process_time() - t < 4.0  # about 1 s of CPU for 3 policies x 4 instances x 200 requests


def test_simulation_is_deterministic(stream):
    a = simulate(with_failures(xxhash_unshared_seed=True, drop_batches=0.2), stream=stream).summary()
    b = simulate(with_failures(xxhash_unshared_seed=True, drop_batches=0.2), stream=stream).summary()
    assert a == b


def test_hash_memo_changes_nothing(stream):
    cfg = with_failures(tenant_salt=True)
    a = simulate(cfg, stream=stream, memoize=True)
    b = simulate(cfg, stream=stream, memoize=False)
    assert a.summary() == b.summary()
    for p in a.runs:
        assert a.runs[p].hit_tokens == b.runs[p].hit_tokens
        assert a.runs[p].instance_of == b.runs[p].instance_of


def test_one_step_decode_leaves_the_pool_as_token_by_token_decoding():
    prompt = tuple(range(40))
    out = tuple(range(1000, 1037))

    def pool_after(bulk: bool):
        eng = ScenarioEngine(Scenario("t", EngineConfig(block_size=4, num_blocks=40), ()), record=False)
        eng.apply(Op(0, "arrive", id="a", prompt=prompt))
        eng.apply(Op(1, "admit", id="a"))
        if bulk:
            r = eng.requests["a"]
            r.append_output_token_ids(list(out[:-1]))
            eng.apply(Op(2, "decode", id="a"))
            r.append_output_token_ids(out[-1])
        else:
            eng.apply(Op(2, "generate", id="a", tokens=out))
        snap = eng.snapshot()
        r = eng.requests["a"]
        return snap.blocks, snap.free_queue, snap.cached, r.num_computed_tokens, r.num_tokens, tuple(r.block_hashes)

    assert pool_after(True) == pool_after(False)


def test_ask_the_router(stream):
    res = simulate(SMALL, stream=stream, policies=("prefix",))
    q = stream.requests[0]
    spec = ", ".join(str(t) for t in q.tokens)
    a = ask(res, spec)
    assert a.tokens == len(q.tokens)
    assert max(a.matches) == a.cap  # the first prompt is cached somewhere, in full
    assert a.matches[a.instance] == max(a.matches)
