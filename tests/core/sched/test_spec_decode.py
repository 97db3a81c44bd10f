"""Speculative decoding in the core: SpeculativeConfig's numbers, lookahead slots that are never
hashed, drafts scheduled, verified and rolled back by the sync scheduler (spec part 2, rules 72-74)."""

from __future__ import annotations

import pytest

from explorer.core.errors import ConfigError
from explorer.core.events import BlockStored
from explorer.core.hashing import init_none_hash
from explorer.core.kv_cache_manager import KVCacheManager
from explorer.core.kv_cache_observer import KVCacheObserver
from explorer.core.kv_cache_utils import get_request_block_hasher
from explorer.core.request import Request
from explorer.core.sched.config import SchedulerConfig
from explorer.core.sched.engine_core import make_engine_core
from explorer.core.sched.kv_connector.base import KVTransferConfig
from explorer.core.sched.kv_connector.static import StaticConnector
from explorer.core.sched.speculative import SpeculativeConfig
from tests.core.invariants import check_invariants


@pytest.mark.parametrize(
    ("method", "drop", "lookahead", "prefill_lookahead", "slots"),
    [
        ("eagle", True, 3, 1, 0),
        ("eagle3", True, 3, 1, 0),
        ("mtp", True, 3, 1, 0),
        ("dflash", True, 4, 1, 3),
        ("dspark", True, 3, 1, 0),
        ("draft_model", False, 3, 0, 1),
        ("ngram", False, 0, 0, 0),
    ],
)
def test_the_numbers_vllm_reads_off_the_config(method, drop, lookahead, prefill_lookahead, slots):
    """vllm/config/vllm.py:630-680 and speculative.py:1882-1946 for k = 3 (the eagle, eagle3,
    draft_model and ngram rows are what vLLM's own VllmConfig printed on this machine)."""
    sp = SpeculativeConfig(method, 3)
    assert sp.use_eagle_block_drop() is drop
    assert sp.num_lookahead_tokens == lookahead
    assert sp.num_prefill_lookahead_tokens == prefill_lookahead
    assert sp.max_num_new_slots_for_drafting == slots
    assert not SpeculativeConfig(method, 3, disable_eagle_block_drop=True).use_eagle_block_drop()


def test_multi_module_mtp_reads_k_prefill_tokens_ahead_and_needs_blocks_that_hold_them():
    mtp = SpeculativeConfig("mtp", 4, num_mtp_modules=4)
    assert mtp.use_multi_module_mtp() and mtp.num_prefill_lookahead_tokens == 4
    assert SpeculativeConfig("mtp", 1, num_mtp_modules=4).num_prefill_lookahead_tokens == 1
    with pytest.raises(ConfigError, match="Multi-module MTP with prefix caching requires scheduler_block_size"):
        KVCacheManager(16, 2, use_eagle=True, num_prefill_lookahead=4)
    KVCacheManager(16, 2, enable_caching=False, use_eagle=True, num_prefill_lookahead=4)  # no caching: fine
    # The last num_prefill_lookahead - 1 computed tokens are never cached (coordinator.py:353-358).
    mgr = KVCacheManager(16, 4, use_eagle=True, num_prefill_lookahead=4)
    hasher = get_request_block_hasher(4, init_none_hash("sha256", None))
    req = Request("R", list(range(16)), hasher)
    mgr.allocate_slots(req, 16)
    assert [b.block_hash is not None for b in mgr.get_blocks("R").blocks[0]] == [True, True, True, False]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(max_num_batched_tokens=1, max_num_seqs=1, speculative=("draft_model", 2)), "not enough slots"),
        (dict(async_scheduling=True, speculative=("ngram", 2)), "vLLM refuses async scheduling with 'ngram'"),
    ],
)
def test_settings_vllm_or_the_mirror_refuse(kwargs, message):
    kwargs = {"async_scheduling": False, **kwargs}
    method, k = kwargs.pop("speculative")
    config = SchedulerConfig(**kwargs, speculative_config=SpeculativeConfig(method, k))
    with pytest.raises(ConfigError, match=message):
        config.check(1 << 20)


def test_unknown_methods_and_counts_are_refused():
    with pytest.raises(ConfigError, match="unknown speculative method"):
        SpeculativeConfig("medusa", 3)
    with pytest.raises(ConfigError, match="at least 1"):
        SpeculativeConfig("eagle", 0)


def test_the_scheduler_refuses_a_manager_built_without_the_drop():
    with pytest.raises(ConfigError, match="use_eagle"):
        make_engine_core(
            KVCacheManager(16),
            SchedulerConfig(async_scheduling=False, speculative_config=SpeculativeConfig("eagle", 3)),
        )


def test_lookahead_slots_are_allocated_and_never_hashed():
    """Rule 73: a 30-token prompt with 3 lookahead slots gets 3 blocks; only block 0 is hashed."""
    mgr = KVCacheManager(16, 16, enable_kv_cache_events=True)
    hasher = get_request_block_hasher(16, init_none_hash("sha256", None))
    req = Request("R", list(range(30)), hasher)
    new = mgr.allocate_slots(req, 30, num_lookahead_tokens=3)
    assert new is not None and new.get_block_ids() == ([1, 2, 3],)
    assert [len(e.block_hashes) for e in mgr.take_events() if isinstance(e, BlockStored)] == [1]
    # At max_model_len the lookahead is cut: the slots never pass it.
    short = KVCacheManager(16, 16, max_model_len=32)
    assert short.allocate_slots(Request("S", list(range(30)), hasher), 30, num_lookahead_tokens=3).get_block_ids() == (
        [1, 2],
    )


class Drafts(KVCacheObserver):
    def __init__(self) -> None:
        self.verified: list[tuple[str, int, int, bool, int]] = []
        self.proposed: list[tuple[str, int]] = []

    def on_drafts_verified(self, request_id, num_drafts, num_accepted, placeholders, num_computed_tokens):
        self.verified.append((request_id, num_drafts, num_accepted, placeholders, num_computed_tokens))

    def on_drafts_proposed(self, request_id, num_drafts):
        self.proposed.append((request_id, num_drafts))


def _engine(method="eagle", k=3, budget=2048, num_blocks=64, max_model_len=1 << 20):
    spec = SpeculativeConfig(method, k)
    log = Drafts()
    mgr = KVCacheManager(
        num_blocks,
        16,
        max_model_len,
        enable_kv_cache_events=True,
        observer=log,
        use_eagle=spec.use_eagle_block_drop(),
        num_prefill_lookahead=spec.num_prefill_lookahead_tokens,
    )
    core = make_engine_core(mgr, SchedulerConfig(budget, 4, 0, False, spec))
    hasher = get_request_block_hasher(16, init_none_hash("sha256", None))
    return core, mgr, log, hasher


def test_rule_72_sync_drafts_are_scheduled_verified_and_rolled_back():
    """exp_c2_eagle (sync): a 30-token prompt, drafts accepted 2, 0, 3."""
    core, mgr, log, hasher = _engine()
    req = Request("R", list(range(30)), hasher, max_tokens=20)
    core.add_request(req, list(range(500, 520)), [2, 0, 3])
    computed, stored, scheduled = [], [], []
    batches = core.scheduler.kv_event_publisher.batches
    for _ in range(4):
        n = len(batches)
        r = core.step_fn()
        scheduled.append(r.scheduler_output.num_scheduled_tokens["R"])
        computed.append(req.num_computed_tokens)
        stored.append(sum(len(e.block_hashes) for b in batches[n:] for e in b.events))
        check_invariants(mgr)
    assert scheduled == [30, 4, 4, 4]
    assert req.output_token_ids == list(range(500, 509))  # 1, then 2 + 1, 0 + 1, 3 + 1
    assert computed == [30, 33, 34, 38]
    assert stored == [1, 0, 1, 0]  # block 1 (tokens 16-31) is hashed by step 3's allocation
    assert log.verified == [("R", 3, 2, False, 33), ("R", 3, 0, False, 34), ("R", 3, 3, False, 38)]
    assert log.proposed == [("R", 3)] * 4
    assert mgr.get_block_ids("R") == ([1, 2, 3],)


def test_an_admission_with_one_token_left_is_padded_with_placeholders():
    """A prompt whose hit leaves one token (scheduler.py:1086-1108) behind a running request:
    scheduled 1 + k, the placeholders accept nothing and use no `accepted` entry."""
    core, mgr, log, hasher = _engine(method="ngram", k=2)
    core.add_request(Request("A", list(range(33)), hasher, max_tokens=4), [1, 2, 3, 4])
    core.step_fn()  # A prefills 33 tokens: blocks 0 and 1 cached
    b = Request("B", list(range(33)), hasher, max_tokens=3)
    core.add_request(b, [7, 8, 9], [2])
    r = core.step_fn()
    assert r.scheduler_output.num_scheduled_tokens == {"A": 3, "B": 3}
    assert r.scheduler_output.scheduled_spec_decode_tokens["B"] == [-1, -1]
    assert ("B", 2, 0, True, 33) in log.verified
    r = core.step_fn()  # B's first real drafts: accepted[0] = 2
    assert r.engine_core_outputs.outputs[1].new_token_ids == [8, 9]


def test_drafts_cut_by_the_budget_and_a_draft_model_costs_a_slot():
    """draft_model: every scheduled request takes one more slot of the input budget (9 here):
    step 2 gives A 1 + 3 drafts (room 9 - 1), B only 9 - 4 - 2 = 3 tokens, so 2 of its drafts;
    B's `accepted` of 3 is capped at the 2 scheduled."""
    core, mgr, log, hasher = _engine(method="draft_model", k=3, budget=9)
    core.add_request(Request("A", [100, 101, 102], hasher, max_tokens=9), list(range(10, 19)), [3])
    core.add_request(Request("B", [200, 201, 202], hasher, max_tokens=9), list(range(20, 29)), [3])
    r = core.step_fn()
    assert r.scheduler_output.num_scheduled_tokens == {"A": 3, "B": 3}
    r = core.step_fn()
    assert r.scheduler_output.num_scheduled_tokens == {"A": 4, "B": 3}
    assert r.scheduler_output.scheduled_spec_decode_tokens == {"A": [0, 0, 0], "B": [0, 0]}
    assert {o.request_id: o.new_token_ids for o in r.engine_core_outputs.outputs} == {
        "A": [11, 12, 13, 14],
        "B": [21, 22, 23],
    }


def test_each_update_reports_its_verified_drafts_in_spec_decoding_stats():
    """vLLM's make_spec_decoding_stats: one observation per request that verified drafts in the
    update (placeholders included), summed; None for an update that verified none."""
    core, mgr, log, hasher = _engine()
    core.add_request(Request("R", list(range(30)), hasher, max_tokens=20), list(range(500, 520)), [2, 0, 3])
    got = []
    for _ in range(4):
        stats = core.step_fn().engine_core_outputs.scheduler_stats
        assert stats is not None
        sd = stats.spec_decoding_stats
        got.append(None if sd is None else (sd.num_drafts, sd.num_draft_tokens, sd.num_accepted_tokens))
        if sd is not None:
            assert sd.num_spec_tokens == 3 and sd.num_draft_tokens_per_pos == [1, 1, 1]
            assert sum(sd.num_accepted_tokens_per_pos) == sd.num_accepted_tokens
    assert got == [None, (1, 3, 2), (1, 3, 0), (1, 3, 3)]

    core, mgr, log, hasher = _engine(method="draft_model", k=3, budget=9)
    core.add_request(Request("A", [100, 101, 102], hasher, max_tokens=9), list(range(10, 19)), [3])
    core.add_request(Request("B", [200, 201, 202], hasher, max_tokens=9), list(range(20, 29)), [3])
    core.step_fn()
    stats = core.step_fn().engine_core_outputs.scheduler_stats
    assert stats is not None and stats.spec_decoding_stats is not None
    sd = stats.spec_decoding_stats
    assert (sd.num_drafts, sd.num_draft_tokens, sd.num_accepted_tokens) == (2, 5, 5)
    assert sd.num_accepted_tokens_per_pos == [2, 2, 1] and sd.num_draft_tokens_per_pos == [2, 2, 1]


def test_the_async_scheduler_takes_drafts_with_a_kv_connector():
    core = make_engine_core(
        KVCacheManager(16, use_eagle=True, num_prefill_lookahead=1),
        SchedulerConfig(async_scheduling=True, speculative_config=SpeculativeConfig("eagle", 3)),
        connector=StaticConnector(KVTransferConfig()),
    )
    assert core.scheduler.connector is not None and core.scheduler.speculative_config is not None


def test_the_async_scheduler_holds_placeholder_drafts_and_counts_them_in_flight():
    """async_scheduler.py:25-57: a request that samples leaves k -1 drafts for its next step and
    1 + its scheduled drafts as output placeholders; the next batch is planned before the
    output, as if every draft in flight were accepted."""
    core = make_engine_core(
        KVCacheManager(64, 16, use_eagle=True, num_prefill_lookahead=1),
        SchedulerConfig(async_scheduling=True, speculative_config=SpeculativeConfig("eagle", 3)),
    )
    hasher = get_request_block_hasher(16, init_none_hash("sha256", None))
    req = Request("R", list(range(30)), hasher, max_tokens=10)
    core.add_request(req, list(range(500, 510)), accepted=[2])
    core.step_fn()  # the prefill: queued, no update yet
    assert (req.num_computed_tokens, req.num_output_placeholders, req.spec_token_ids) == (30, 1, [-1, -1, -1])
    step = core.step_fn()  # 1 + 3 placeholder drafts, then the prefill's update
    assert step.scheduler_output is not None
    assert step.scheduler_output.scheduled_spec_decode_tokens == {"R": [-1, -1, -1]}
    assert (req.num_computed_tokens, req.num_output_placeholders, req.output_token_ids) == (34, 4, [500])
    core.step_fn()  # planned as if all 3 were accepted (38); batch 2's update: 2 accepted, 1 rolled back
    assert (req.num_computed_tokens, req.num_output_placeholders) == (37, 4)
    assert req.output_token_ids == [500, 501, 502, 503]
