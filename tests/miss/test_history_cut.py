"""A lookup's history is cut at its first never-cached block when the miss group caches whole
prefixes (explorer/core/block_hash_map.py CachedMask): the records must be the ones the full
per-block history gives, over random scenarios at both levels, the lessons and a trace replay."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from explorer.core.block_hash_map import BlockHashToBlockMap
from explorer.core.hashing import BlockHash, make_block_hash_with_group_id
from explorer.miss.reasons import MissTracker
from explorer.scenario.engine import replay
from explorer.scenario.parse import load_scenario, parse_scenario_dict
from explorer.scenario.randgen import random_scenario
from explorer.scenario.recorder import StepError
from explorer.traffic.hashing import prepare
from explorer.traffic.sequential import replay_vllm
from explorer.traffic.trace import load_trace, shipped_trace_path
from vllm_drivers.engine_step_scenarios import random_connector_raw_scenario, random_raw_scenario

ROOT = Path(__file__).resolve().parents[2]
lazy = BlockHashToBlockMap.lazy_mask


def _records(trace) -> list:
    out = []
    for s in trace.steps:
        if s.miss is not None:
            out.append((s.index, s.miss.to_json(), s.miss.block_reasons))
        for rid, m in sorted((s.misses or {}).items()):
            out.append((s.index, rid, m.to_json(), m.block_reasons))
    return out


def _both(run, monkeypatch) -> tuple[object, object]:
    cut = run()
    with monkeypatch.context() as m:  # every block's history, as if no group cached whole prefixes
        m.setattr(
            BlockHashToBlockMap, "lazy_mask", lambda self, hashes, suffixes, whole: lazy(self, hashes, suffixes, False)
        )
        full = run()
    return cut, full


def _raws(seed: int) -> list[dict]:
    return [
        random_scenario(seed, 40, profile="mixed"),
        random_scenario(seed, 40, profile="hybrid"),
        random_raw_scenario(seed),
        random_connector_raw_scenario(seed),
    ]


@pytest.mark.parametrize("seed", range(6))
def test_random_scenarios_give_the_same_records_cut_or_not(seed, monkeypatch):
    compared = 0
    for raw in _raws(seed):
        try:
            cut, full = _both(lambda: _records(replay(parse_scenario_dict(raw, "<random>"))), monkeypatch)
        except StepError:  # a draw the mirror refuses
            continue
        assert cut == full
        compared += len(cut)
    assert compared > 0


def test_the_lessons_give_the_same_records_cut_or_not(monkeypatch):
    for path in sorted((ROOT / "lessons").glob("*.toml")):
        cut, full = _both(lambda: _records(replay(load_scenario(path))), monkeypatch)
        assert cut == full, path.stem


def test_a_trace_replay_that_evicts_gives_the_same_records_cut_or_not(monkeypatch):
    prep = prepare(load_trace(shipped_trace_path(), limit=120), 16, True, False, None)

    def run():
        r = replay_vllm(prep, 600, keep_misses=True)
        return r.miss_tokens, [None if m is None else (m.to_json(), m.block_reasons) for m in r.misses]

    cut, full = _both(run, monkeypatch)
    assert cut == full
    tokens, misses = cut
    assert tokens["evicted"] > 0 and tokens["never_cached"] > 0  # both kinds of cut were taken
    assert sum(m is not None and m[0]["first_miss"] == "evicted" for m in misses) > 0


class _Mask(list):
    """A lookup report's mask as the core hands it over (block_hash_map.CachedMask)."""

    whole_prefixes = True


def _key(h: bytes) -> bytes:
    return make_block_hash_with_group_id(BlockHash(h), 0)


@pytest.mark.parametrize("external", [0, 4, 8])
def test_the_first_missed_blocks_record_is_the_one_at_its_lookup(external):
    """Blocks 1-3 were evicted by A, B and C; the lookup hits block 0, a connector adds
    ``external`` tokens, and the allocation that follows pops block 2 again (a new record):
    evicted_by is the record of the first missed block as it was at the lookup."""
    bs = 4
    hashes = tuple(bytes([i]) * 32 for i in range(5))
    t = MissTracker(bs)
    for step, (who, h) in enumerate([("A", hashes[1]), ("B", hashes[2]), ("C", hashes[3])]):
        t.step = step
        t.on_admission_check(SimpleNamespace(request_id=who, ok=True))
        t.on_hashes_removed((_key(h),), "evicted")
    t.step = 7
    t.on_lookup_blocks("R", 0, hashes, _Mask([True, False, False, False, False]))
    t.on_lookup("R", 5 * bs, 5 * bs - 1, bs)
    t.on_external_lookup("R", bs, external, False)
    t.on_admission_check(SimpleNamespace(request_id="R", ok=True))
    t.on_hashes_removed((_key(hashes[2]),), "evicted")  # R's allocation: a later record for block 2
    miss = t.take()["R"]
    first = 1 + external // bs
    assert miss.first_miss_block == first and miss.first_miss == "evicted"
    assert miss.evicted_by is not None and (miss.evicted_by.step, miss.evicted_by.request_id) == (
        first - 1,
        "ABC"[first - 1],
    )
    assert miss.block_reasons == (None,) * first + ("evicted",) * (3 - first + 1) + ("last_token",)
