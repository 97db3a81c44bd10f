"""Property tests that drive KVCacheManager as a scheduler would: requests with shared prefixes
arrive, are admitted (lookup + allocate_slots + stats, whole or in chunks), decode, finish, are
preempted, and the prefix cache is reset. After every operation the structural invariants
(tests/core/invariants.py), the event stream, the stats and the admission decision are checked.

Two drivers share the same operations: a hypothesis RuleBasedStateMachine (shrinks to a minimal
failing program) and a long random walk (reaches the crowded-pool states short programs rarely do).
"""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from explorer.core.events import AllBlocksCleared
from explorer.core.request import LoRARequest, Request
from tests.core.helpers import Sched
from tests.core.invariants import EventMirror, check_invariants

# Shared prefixes: requests built from these share leading blocks, so they hit and duplicate.
BASES = [list(range(100, 148)), [7] * 48]
PREFIX_LENS = [0, 1, 8, 16, 16, 24, 32, 32, 48]
LORA = LoRARequest("sql", 1, "loras/sql")


def cdiv(a, b):
    return -(-a // b)


class Driver:
    """One engine plus the scheduler-side bookkeeping, with a check after every operation."""

    def __init__(self, num_blocks, block_size, caching=True, use_int=True, algo="sha256"):
        self.s = Sched(num_blocks, block_size, caching=caching, use_int=use_int, algo=algo, seed="0")
        self.bs = block_size
        self.live: dict[str, Request] = {}
        self.next_id = 0
        self.mirror = EventMirror()
        self.stats_seen = [0] * 6  # what make_prefix_cache_stats reported, summed
        self.stats_want = [0] * 6  # what admissions recorded: requests, queries, hits, then preempted_*

    # ---- what each operation may pick --------------------------------------------------------

    def admittable(self):
        return sorted(r for r, q in self.live.items() if q.num_computed_tokens < q.num_tokens)

    def decodable(self):
        return sorted(r for r, q in self.live.items() if 0 < q.num_computed_tokens == q.num_tokens)

    def preemptable(self):
        return sorted(r for r, q in self.live.items() if q.num_computed_tokens > 0)

    # ---- operations --------------------------------------------------------------------------

    def snapshot(self):
        pool, m = self.s.pool, self.s.mgr.coordinator.single_type_managers[0]
        return (
            self.s.free_ids(),
            [(b.ref_cnt, b.block_hash) for b in pool.blocks],
            {k: [b.block_id for b in v] for k, v in pool.cached_block_hash_to_block.items()},
            {k: [b.block_id for b in v] for k, v in m.req_to_blocks.items()},
            dict(m.num_cached_block),
            len(pool.kv_event_queue),
        )

    def arrive(self, base, prefix_len, suffix, salt=None, lora=False, prompt_logprobs=False):
        tokens = BASES[base][:prefix_len] + list(suffix) or [0]
        rid = f"r{self.next_id}"
        self.next_id += 1
        self.live[rid] = self.s.request(
            rid, tokens, cache_salt=salt, lora_request=LORA if lora else None, prompt_logprobs=prompt_logprobs
        )
        return rid

    def admit(self, rid, chunk):
        """Lookup (first chunk), allocate_slots, stats; the decision must match rule 31.7 and a
        refusal must change nothing."""
        req = self.live[rid]
        mgr, pool = self.s.mgr, self.s.pool
        first = req.num_computed_tokens == 0
        before = self.snapshot()
        table = mgr.get_block_ids(rid)[0]
        hits = []
        if first:
            blocks, hit, _ = mgr.get_computed_blocks(req)
            assert self.snapshot() == before, "get_computed_blocks changed state"
            hits = blocks.blocks[0]
            assert hit == len(hits) * self.bs and hit <= (req.num_tokens - 1) // self.bs * self.bs
            if not mgr.prefix_cache_lookup_enabled(req):
                assert hit == 0
            for i, b in enumerate(hits):  # a hit is this request's own prefix
                assert b.block_hash[:-4] == req.block_hashes[i]
        else:
            hit = 0
        remaining = req.num_tokens - req.num_computed_tokens - hit
        num_new = remaining if chunk is None else min(chunk, remaining)
        # Rule 31.7, computed independently: new blocks + hit blocks that leave the free queue.
        need = cdiv(req.num_computed_tokens + hit + num_new, self.bs)
        required = max(need - len(table) - len(hits), 0) + sum(1 for b in hits if b.ref_cnt == 0)
        expect_ok = required <= pool.get_num_free_blocks()

        out = self.s.admit(req, chunk)
        assert (out is not None) == expect_ok, f"admission: required {required}, free {before[0]}"
        if out is None:
            assert self.snapshot() == before, "a refused allocate_slots changed state"
            return
        if first and mgr.prefix_cache_lookup_enabled(req):
            i = 3 if req.num_preemptions > 0 else 0
            self.stats_want[i] += 1
            self.stats_want[i + 1] += req.num_tokens
            self.stats_want[i + 2] += hit

    def decode(self, rid, tokens):
        """Sample tokens for a running request, then allocate slots for the pending ones."""
        req = self.live[rid]
        req.append_output_token_ids(list(tokens))
        before = self.snapshot()
        free = self.s.pool.get_num_free_blocks()
        need = cdiv(req.num_tokens, self.bs) - len(self.s.table(req))
        new = self.s.mgr.allocate_slots(req, req.num_tokens - req.num_computed_tokens)
        assert (new is not None) == (need <= free)
        if new is None:
            assert self.snapshot() == before, "a refused decode allocation changed state"
        else:
            assert len(new) == max(need, 0)
            req.num_computed_tokens = req.num_tokens

    def finish(self, rid):
        self.s.finish(self.live.pop(rid))
        assert rid not in self.s.mgr.coordinator.single_type_managers[0].req_to_blocks

    def preempt(self, rid):
        self.s.preempt(self.live[rid])

    def reset(self):
        pool = self.s.pool
        idle = pool.get_num_free_blocks() == pool.num_gpu_blocks - 1
        before = self.snapshot()
        ok = self.s.mgr.reset_prefix_cache()
        assert ok == idle == (not self.s.mgr.coordinator.single_type_managers[0].req_to_blocks)
        if ok:
            assert len(pool.cached_block_hash_to_block) == 0
            assert all(b.block_hash is None for b in pool.blocks)
            assert self.s.free_ids() == before[0]
            if pool.enable_kv_cache_events:
                assert isinstance(pool.kv_event_queue[-1], AllBlocksCleared)
        else:
            assert self.snapshot() == before

    # ---- checked after every operation -------------------------------------------------------

    def check(self):
        mgr = self.s.mgr
        check_invariants(mgr, self.live.values())

        m = mgr.coordinator.single_type_managers[0]
        for rid, req in self.live.items():
            table = m.req_to_blocks.get(rid, [])
            assert len(table) == cdiv(req.num_computed_tokens, self.bs), (rid, len(table), req.num_computed_tokens)
            if mgr.enable_caching:
                assert m.num_cached_block.get(rid, 0) == req.num_computed_tokens // self.bs
        assert set(m.req_to_blocks) <= set(self.live)

        events = mgr.take_events()
        if not mgr.enable_caching:
            assert all(isinstance(e, AllBlocksCleared) for e in events)
        self.mirror.apply(events)
        self.mirror.check(mgr)

        st_ = mgr.make_prefix_cache_stats()
        got = (st_.requests, st_.queries, st_.hits, st_.preempted_requests, st_.preempted_queries, st_.preempted_hits)
        self.stats_seen = [a + b for a, b in zip(self.stats_seen, got)]
        assert self.stats_seen == self.stats_want


# ---- the state machine -----------------------------------------------------------------------


class KVCacheMachine(RuleBasedStateMachine):
    @initialize(
        num_blocks=st.integers(2, 16),
        block_size=st.sampled_from([1, 2, 4, 4, 8, 16]),
        caching=st.sampled_from([True, True, True, False]),
        use_int=st.booleans(),
        algo=st.sampled_from(["sha256", "xxhash"]),
    )
    def setup(self, num_blocks, block_size, caching, use_int, algo):
        self.d = Driver(num_blocks, block_size, caching, use_int, algo)

    @rule(
        base=st.integers(0, len(BASES) - 1),
        prefix_len=st.sampled_from(PREFIX_LENS),
        suffix=st.lists(st.integers(0, 3), max_size=6),
        salt=st.sampled_from([None] * 7 + ["s"]),
        lora=st.sampled_from([False] * 7 + [True]),
        prompt_logprobs=st.sampled_from([False] * 7 + [True]),
        admit_now=st.booleans(),
    )
    def arrive(self, base, prefix_len, suffix, salt, lora, prompt_logprobs, admit_now):
        """A request arrives (a shared prefix, then its own tokens); maybe admitted whole at once."""
        rid = self.d.arrive(base, prefix_len, suffix, salt, lora, prompt_logprobs)
        if admit_now:
            self.d.admit(rid, None)

    @precondition(lambda self: self.d.admittable())
    @rule(data=st.data(), chunk=st.none() | st.none() | st.integers(1, 24))
    def admit(self, data, chunk):
        """Admit a waiting or preempted request, continue a chunked prefill, or compute tokens whose
        decode allocation failed before."""
        self.d.admit(data.draw(st.sampled_from(self.d.admittable())), chunk)

    @precondition(lambda self: self.d.decodable())
    @rule(data=st.data(), tokens=st.lists(st.integers(0, 3), min_size=1, max_size=5))
    def decode(self, data, tokens):
        self.d.decode(data.draw(st.sampled_from(self.d.decodable())), tokens)

    @precondition(lambda self: self.d.live)
    @rule(data=st.data())
    def finish(self, data):
        self.d.finish(data.draw(st.sampled_from(sorted(self.d.live))))

    @precondition(lambda self: self.d.preemptable())
    @rule(data=st.data())
    def preempt(self, data):
        self.d.preempt(data.draw(st.sampled_from(self.d.preemptable())))

    @rule()
    def reset_prefix_cache(self):
        self.d.reset()

    @invariant()
    def invariants_hold(self):
        if hasattr(self, "d"):
            self.d.check()


KVCacheMachine.TestCase.settings = settings(
    max_examples=200,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
test_kv_cache_manager_state_machine = KVCacheMachine.TestCase


# ---- the long random walk --------------------------------------------------------------------


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**32 - 1),
    num_blocks=st.integers(3, 16),
    block_size=st.sampled_from([2, 4, 8]),
    caching=st.sampled_from([True, True, True, False]),
)
def test_kv_cache_manager_random_walk(seed, num_blocks, block_size, caching):
    """300 scheduler operations, weighted towards admissions into a crowded pool."""
    rnd = random.Random(seed)
    d = Driver(num_blocks, block_size, caching)
    ops = ["arrive", "admit", "decode", "finish", "preempt", "reset"]
    weights = [4, 6, 3, 3, 1, 0.3]
    for _ in range(300):
        op = rnd.choices(ops, weights)[0]
        if op == "arrive":
            rid = d.arrive(
                rnd.randrange(len(BASES)),
                rnd.choice(PREFIX_LENS),
                [rnd.randrange(4) for _ in range(rnd.randrange(7))],
                salt="s" if rnd.random() < 0.1 else None,
                lora=rnd.random() < 0.1,
                prompt_logprobs=rnd.random() < 0.05,
            )
            if rnd.random() < 0.5:
                d.admit(rid, None)
        elif op == "admit" and d.admittable():
            d.admit(rnd.choice(d.admittable()), rnd.choice([None, None, rnd.randint(1, 24)]))
        elif op == "decode" and d.decodable():
            d.decode(rnd.choice(d.decodable()), [rnd.randrange(4) for _ in range(rnd.randint(1, 5))])
        elif op == "finish" and d.live:
            d.finish(rnd.choice(sorted(d.live)))
        elif op == "preempt" and d.preemptable():
            d.preempt(rnd.choice(d.preemptable()))
        elif op == "reset":
            d.reset()
        d.check()
