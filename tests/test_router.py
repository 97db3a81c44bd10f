"""The prefix-aware router and its fleet simulation (explorer.router)."""

from __future__ import annotations

import base64
import time
import zlib
from collections import Counter
from dataclasses import replace

import pytest

from explorer import router as R
from explorer.core.events import KVEventBatch, encode_batch
from explorer.core.hashing import init_none_hash
from explorer.errors import BadInput
from explorer.events_zmq import KVEventStream, live_frames
from explorer.scenario import EngineConfig, Op, Scenario
from explorer.trace import ScenarioEngine

SMALL = R.FleetConfig(
    title="small",
    fleet=R.FleetSpec(instances=3, num_blocks=600),
    workload=R.WorkloadSpec(
        seed=3,
        requests=60,
        tenants=2,
        system_prompts=3,
        system_prompt_tokens=(200, 400),
        user_tokens=(20, 120),
        output_tokens=(20, 80),
        turns=(2, 6),
        session_gap_ms=150.0,
    ),
)


def run(cfg: R.FleetConfig, stream: R.RequestStream | None = None) -> R.PolicyRun:
    return R.simulate(cfg, policies=("prefix",), baseline=False, stream=stream).runs["prefix"]


@pytest.fixture(scope="module")
def stream() -> R.RequestStream:
    return R.build_stream(SMALL)


@pytest.fixture(scope="module")
def healthy(stream) -> R.PolicyRun:
    return run(SMALL, stream)


def with_failures(**kw) -> R.FleetConfig:
    return replace(SMALL, failures=R.FailureSpec(**kw))


# ---- the router's choice on crafted cases ----------------------------------------------------


def router(bs=4, **kw) -> R.PrefixRouter:
    return R.PrefixRouter(bs, init_none_hash("sha256"), "int64", **kw)


def view_of(r: R.PrefixRouter, tokens, blocks) -> Counter:
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
    for _i, op in enumerate([Op(0, "arrive", id="a", prompt=prompt), Op(1, "admit", id="a"), Op(2, "finish", id="a")]):
        events += eng.apply(op).events
    stream = KVEventStream()
    stream.feed_live(live_frames(b"instance-0", 0, encode_batch(KVEventBatch(1.0, events, 0))), now=0.0)
    view = stream.instances[("instance-0", 0)].hashes
    r = R.PrefixRouter(16, init_none_hash("sha256"), "int64")
    keys, cap = r.request_keys(prompt)
    assert sum(view.values()) == 3 and all(isinstance(h, int) for h in view)
    assert set(keys[:3]) == set(view)
    assert r.match(keys, view, cap) == 3
    # the same request arriving again hits exactly that
    step = [eng.apply(Op(3, "arrive", id="b", prompt=prompt)), eng.apply(Op(4, "admit", id="b"))][-1]
    assert step.hit_tokens == 3 * 16


# ---- a healthy fleet ---------------------------------------------------------------------------


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
    result = R.simulate(R.FleetConfig())
    hr = {p: r.hit_rate for p, r in result.runs.items()}
    assert hr["prefix"] > hr["round_robin"] + 0.1
    assert hr["prefix"] > hr["least_loaded"] + 0.1
    assert result.runs["prefix"].saved_ms > result.runs["round_robin"].saved_ms


def test_default_fleet_is_fast():
    t = time.process_time()
    R.simulate(R.FleetConfig())
    assert time.process_time() - t < 4.0  # about 1 s of CPU for 3 policies x 4 instances x 200 requests


def test_simulation_is_deterministic(stream):
    a = R.simulate(with_failures(xxhash_unshared_seed=True, drop_batches=0.2), stream=stream).summary()
    b = R.simulate(with_failures(xxhash_unshared_seed=True, drop_batches=0.2), stream=stream).summary()
    assert a == b


def test_hash_memo_changes_nothing(stream):
    cfg = with_failures(tenant_salt=True)
    a = R.simulate(cfg, stream=stream, memoize=True)
    b = R.simulate(cfg, stream=stream, memoize=False)
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


# ---- the failure switches ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "failures",
    [
        {"router_hash_algo": "sha256_cbor"},
        {"router_hash_seed": "0"},
        {"router_block_size": 32},
        {"router_wrong_hash_form": True},
        {"xxhash_unshared_seed": True},
        {"tenant_salt": True, "router_ignores_salt": True},
    ],
    ids=["other-algo", "other-seed", "other-block-size", "digests-vs-ints", "xxhash-unshared", "salt-ignored"],
)
def test_mismatched_hashing_gives_zero_matches(stream, healthy, failures):
    r = run(with_failures(**failures), stream)
    assert r.predicted == 0
    assert r.router_keys_known == 0
    assert max(r.best_match_tokens) == 0
    # the instances still hit their own caches; only the routing lost its information
    assert r.hits > 0
    assert r.hit_rate < healthy.hit_rate


def test_ints_read_as_digests_the_other_way_round(stream):
    cfg = replace(SMALL, fleet=replace(SMALL.fleet, int_block_hashes=False))
    assert run(cfg, stream).predicted > 0
    bad = replace(cfg, failures=R.FailureSpec(router_wrong_hash_form=True))
    assert run(bad, stream).predicted == 0


def test_xxhash_with_a_shared_seed_works_and_without_one_every_instance_differs(stream):
    shared = replace(SMALL, fleet=replace(SMALL.fleet, hash_algo="xxhash", hash_seed="42"))
    r = run(shared, stream)
    assert r.predicted > 0 and r.prediction_check()["over"] == r.prediction_check()["under"] == 0
    assert {i.seed for i in r.instances} == {"42"}
    unshared = run(with_failures(xxhash_unshared_seed=True), stream)
    seeds = [i.seed for i in unshared.instances]
    assert len(set(seeds)) == 3 and all(len(s) == 64 for s in seeds)


def test_tenant_salt_stops_cross_tenant_hits(stream, healthy):
    assert healthy.cross_tenant_hit_tokens > 0  # without salts tenants share system prompts
    salted = run(with_failures(tenant_salt=True), stream)
    assert salted.cross_tenant_hit_tokens == 0
    assert salted.predicted > 0  # the router hashes with the request's salt: it still matches
    assert salted.prediction_check()["over"] == salted.prediction_check()["under"] == 0


def test_lost_events_count_gaps_and_give_fewer_matches(stream, healthy):
    lossy = run(with_failures(drop_batches=0.3, drop_seed=4), stream)
    assert lossy.dropped_batches > 0
    assert lossy.subscriber["gaps"] > 0 and lossy.subscriber["lost"] > 0
    assert lossy.subscriber["lost"] <= lossy.dropped_batches
    assert lossy.predicted < healthy.predicted
    assert sum(i.missing for i in lossy.instances) > 0  # stores it never saw
    chk = lossy.prediction_check()
    assert chk["over"] + chk["under"] > 0  # the stale view mispredicts


def test_explanations_are_generated_from_the_numbers(stream):
    res = R.simulate(with_failures(router_hash_algo="sha256_cbor"), stream=stream)
    ((name, text),) = R.explain(res)
    assert name == "router_hash_algo"
    assert "sha256_cbor" in text and "matched 0 tokens" in text
    assert f"{res.runs[R.BASELINE].hit_rate:.1%}" in text
    res = R.simulate(with_failures(drop_batches=0.3), stream=stream)
    ((name, text),) = R.explain(res)
    assert name == "drop_batches" and f"{res.runs['prefix'].dropped_batches:,} of" in text
    res = R.simulate(SMALL, stream=stream)
    ((name, text),) = R.explain(res)
    assert name == "healthy" and f"{res.runs['prefix'].hit_rate:.1%}" in text


# ---- streams --------------------------------------------------------------------------------------


def test_chat_stream_shares_system_prompts_and_grows_sessions(stream):
    assert len(stream.requests) == 60
    by_session = {}
    for q in stream.requests:
        by_session.setdefault(q.session, []).append(q)
    multi = [qs for qs in by_session.values() if len(qs) > 1]
    assert multi
    for qs in multi:
        a, b = qs[0], qs[1]
        # the next turn resends the conversation: previous prompt + reply + a new message
        assert b.tokens[: len(a.tokens) + len(a.output)] == a.tokens + a.output
    assert all(q.arrival_ms <= r.arrival_ms for q, r in zip(stream.requests, stream.requests[1:]))


def test_trace_stream_from_uploaded_bytes():
    import json

    lines = [
        {"timestamp": 0, "input_length": 600, "output_length": 3, "hash_ids": [1, 2]},
        {"timestamp": 5, "input_length": 700, "output_length": 2, "hash_ids": [1, 2]},
        {"timestamp": 9, "input_length": 300, "output_length": 2, "hash_ids": [7]},
    ]
    data = ("\n".join(json.dumps(x) for x in lines) + "\n").encode()
    cfg = replace(SMALL, workload=replace(SMALL.workload, kind="trace", trace="upload", requests=10))
    res = R.simulate(cfg, data, "tiny.jsonl", policies=("prefix",))
    r = res.runs["prefix"]
    assert res.stream.requests[1].tokens[:600] == res.stream.requests[0].tokens
    assert r.hit_tokens[1] == 592  # 37 full blocks of the first prompt
    with pytest.raises(BadInput, match="upload"):
        R.build_stream(cfg)


def test_tokenize():
    assert R.tokenize("0:3, 7*2") == [0, 1, 2, 7, 7]
    with pytest.raises(BadInput):
        R.tokenize("   ")
    with pytest.raises(BadInput):
        R.tokenize("abc", kind="spec")


def test_tokenize_text_uses_smollm2(monkeypatch):
    import explorer.tokens as T

    monkeypatch.setattr(T, "encode_text", lambda text: [len(text), 1])
    assert R.tokenize("hello", kind="text") == [5, 1]


def test_ask_the_router(stream):
    res = R.simulate(SMALL, stream=stream, policies=("prefix",))
    q = stream.requests[0]
    spec = ", ".join(str(t) for t in q.tokens)
    a = R.ask(res, spec)
    assert a.tokens == len(q.tokens)
    assert max(a.matches) == a.cap  # the first prompt is cached somewhere, in full
    assert a.matches[a.instance] == max(a.matches)


# ---- config files ---------------------------------------------------------------------------------


def test_example_fleets_load_and_round_trip():
    fleets = R.example_fleets()
    assert 2 <= len(fleets) <= 4
    for path in fleets.values():
        cfg = R.load_fleet(path)
        again = R.parse_fleet_text(cfg.to_toml(), cfg.source)
        assert again == cfg
        assert R.decode_share(R.encode_share(cfg)) == replace(cfg, source="shared fleet link")


def test_default_config_equals_the_first_example():
    first = next(iter(R.example_fleets().values()))
    cfg = R.load_fleet(first)
    assert replace(cfg, title="", description="", source="") == replace(R.FleetConfig(), title="", source="")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[fleet]\ninstances = 0\n", r"\[fleet\] instances: expected an integer in 1..16, got 0"),
        ("[fleet]\ninstance = 4\n", r"\[fleet\] instance: unknown key"),
        ("[fleet]\nhash_algo = 'md5'\n", r"\[fleet\] hash_algo: expected one of"),
        ("[router]\ntie_break = 'coin'\n", r"\[router\] tie_break"),
        ("[router]\nload_weight = -1\n", r"\[router\] load_weight"),
        ("[workload]\nturns = [5, 2]\n", r"\[workload\] turns: expected \[min, max\]"),
        ("[workload]\nkind = 'batch'\n", r"\[workload\] kind"),
        ("[workload]\nrequests = true\n", r"\[workload\] requests"),
        ("[failures]\ndrop_batches = 1.0\n", r"\[failures\] drop_batches"),
        ("[failures]\nrouter_ignores_salt = true\n", r"\[failures\] router_ignores_salt: needs tenant_salt"),
        (
            "[workload]\n[[workload.system_prompt]]\ntext = 'a'\nprompt = '1:5'\n",
            r"system_prompt\[0\]: give exactly one",
        ),
        ("[workload]\n[[workload.system_prompt]]\nprompt = 'x:y'\n", r"system_prompt\[0\].prompt"),
        ("[fleet]\ninstances = 16\nnum_blocks = 100000\n", r"\[fleet\] num_blocks: 16 instances"),
        ("fleet = 3\n", r"\[fleet\] must be a table"),
        ("[engine]\n", r"engine: unknown top-level key"),
        ("[fleet\n", r"not valid TOML"),
    ],
)
def test_bad_config_names_the_field(text, message):
    with pytest.raises(BadInput, match=message):
        R.parse_fleet_text(text, "f.toml")


def test_explicit_system_prompts():
    cfg = R.parse_fleet_text(
        "[workload]\nrequests = 5\n[[workload.system_prompt]]\nprompt = '0:300'\n[[workload.system_prompt]]\nprompt = [5, 6, 7]\n"
    )
    assert cfg.workload.system_prompts == 2
    s = R.build_stream(cfg)
    assert all(q.tokens[:300] == tuple(range(300)) or q.tokens[:3] == (5, 6, 7) for q in s.requests)
    assert R.parse_fleet_text(cfg.to_toml()) == cfg


def test_share_links_refuse_anything_else():
    token = R.encode_share(SMALL)
    assert token.startswith("v1.") and len(token) < R.MAX_SHARE_CHARS
    for bad in ["", "v2.abc", "v1.", "v1.@@@", token[:-8], "v1." + "A" * 7000]:
        with pytest.raises(BadInput):
            R.decode_share(bad)
    bomb = "v1." + base64.urlsafe_b64encode(zlib.compress(b" " * (1 << 20), 9)).decode().rstrip("=")
    with pytest.raises(BadInput, match="more than"):
        R.decode_share(bomb)
    evil = "v1." + base64.urlsafe_b64encode(zlib.compress(b"__import__('os')", 9)).decode().rstrip("=")
    with pytest.raises(BadInput, match="not valid TOML"):
        R.decode_share(evil)
