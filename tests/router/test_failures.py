"""The failure switches, and the explanations generated from a run's numbers
(explorer.router.failures)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from explorer.router.config import BASELINE, FailureSpec
from explorer.router.failures import explain
from explorer.router.simulate import simulate
from tests.router.helpers import SMALL, run, with_failures


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
    bad = replace(cfg, failures=FailureSpec(router_wrong_hash_form=True))
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
    res = simulate(with_failures(router_hash_algo="sha256_cbor"), stream=stream)
    ((name, text),) = explain(res)
    assert name == "router_hash_algo"
    assert "sha256_cbor" in text and "matched 0 tokens" in text
    assert f"{res.runs[BASELINE].hit_rate:.1%}" in text
    res = simulate(with_failures(drop_batches=0.3), stream=stream)
    ((name, text),) = explain(res)
    assert name == "drop_batches" and f"{res.runs['prefix'].dropped_batches:,} of" in text
    res = simulate(SMALL, stream=stream)
    ((name, text),) = explain(res)
    assert name == "healthy" and f"{res.runs['prefix'].hit_rate:.1%}" in text
