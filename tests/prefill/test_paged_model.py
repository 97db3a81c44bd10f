"""The paged model against a plain reference, with block tables from the KV cache manager."""

from __future__ import annotations

import random

import pytest

torch = pytest.importorskip("torch")

from explorer.prefill.configs import BLOCK_SIZE, TINY  # noqa: E402
from explorer.prefill.engine import PagedEngine, corrupted_block_effect, prepare_pair, prompt_pair  # noqa: E402
from explorer.prefill.measure import measure_prefill  # noqa: E402
from tests.prefill.reference import reference_logits  # noqa: E402


def random_tokens(n: int) -> list[int]:
    return [random.randrange(TINY.vocab_size) for _ in range(n)]


def test_full_prefill_matches_reference_with_scattered_blocks(tiny_model, fresh_seed):
    """Any block ids work, in any order: the table, not the layout, defines the sequence."""
    tokens = random_tokens(90)
    pool = tiny_model.new_pool(40)
    table = random.sample(range(1, 40), 6)  # 6 blocks cover 96 positions
    got = tiny_model.forward(tokens, 0, table, pool, all_logits=True)
    want = reference_logits(TINY, tiny_model.w, tokens)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_suffix_over_prefix_in_the_pool_matches_reference(tiny_model):
    """Prefill a prefix, then the rest in two chunks reading the prefix back from the pool."""
    tokens = random_tokens(150)
    pool = tiny_model.new_pool(30)
    table = random.sample(range(1, 30), 10)
    tiny_model.forward(tokens[:64], 0, table, pool)
    tiny_model.forward(tokens[64:131], 64, table, pool)
    got = tiny_model.forward(tokens[131:], 131, table, pool, all_logits=True)
    want = reference_logits(TINY, tiny_model.w, tokens)[131:]
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_block_table_comes_from_the_manager(tiny_model, fresh_seed):
    pair = prepare_pair(tiny_model, 200, 96, seed=fresh_seed)
    assert pair.hit_block_ids == pair.a_table[: 96 // BLOCK_SIZE]  # B reads A's blocks
    assert len(pair.cached_table) == -(-200 // BLOCK_SIZE)
    assert not set(pair.full_table) & set(pair.hit_block_ids)  # the full run owns fresh blocks
    blocks = pair.engine.mgr.block_pool.blocks
    assert all(blocks[i].ref_cnt == 1 for i in pair.hit_block_ids)  # touched by B alone
    want = reference_logits(TINY, tiny_model.w, pair.b_tokens)[-1]
    torch.testing.assert_close(pair.run_cached(), want, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(pair.run_full(), want, rtol=1e-4, atol=1e-4)


def test_corrupting_a_hit_block_changes_only_the_cached_run(tiny_model, fresh_seed):
    effect = corrupted_block_effect(tiny_model, 200, 96, seed=fresh_seed)
    assert effect["cached_change"] > 1e-2
    assert effect["full_change"] == 0.0


def test_a_wrong_block_table_reads_nan(tiny_model):
    """The pool starts as NaN: reading a block nobody wrote cannot pass unnoticed."""
    pair = prepare_pair(tiny_model, 100, 64)
    assert torch.isfinite(pair.run_cached()).all()
    # The full run's blocks are allocated but not yet written: put one where a hit block was.
    table = [pair.full_table[0]] + pair.cached_table[1:]
    out = tiny_model.forward(pair.b_tokens[64:], 64, table, pair.engine.pool)
    assert torch.isnan(out).all()


def test_measurement_is_consistent(tiny_model, fresh_seed):
    r = measure_prefill(tiny_model, 200, 96, warmup=0, repeats=1, decode_tokens=5, seed=fresh_seed)
    assert r.hit_tokens == 96 and r.hit_block_ids == r.a_block_ids[:6]
    assert r.max_abs_logit_diff < 1e-4
    assert r.greedy_match and len(r.greedy_cached) == 5
    # Greedy decoding through the manager equals greedy decoding by full recompute.
    seq = list(prompt_pair(TINY.vocab_size, 200, 96, fresh_seed)[1])
    for _ in range(5):
        seq.append(int(reference_logits(TINY, tiny_model.w, seq)[-1].argmax()))
    assert r.greedy_cached == seq[200:]
    j = r.to_json()
    assert set(j) == {
        "model",
        "weights",
        "device",
        "dtype",
        "prompt_tokens",
        "hit_tokens",
        "full_ms",
        "cached_ms",
        "saved_ms",
        "saved_fraction",
        "ideal_fraction",
        "flop_ideal_fraction",
        "mfu",
        "max_abs_logit_diff",
        "greedy_match",
    }
    assert j["mfu"] is None and j["weights"] == "random" and j["dtype"] == "float32"
    assert j["ideal_fraction"] == 96 / 200
    assert j["saved_ms"] == pytest.approx(j["full_ms"] - j["cached_ms"])


def test_zero_hit_and_longest_hit(tiny_model):
    for hit in (0, 192):
        r = measure_prefill(tiny_model, 200, hit, warmup=0, repeats=1, decode_tokens=2)
        assert r.hit_tokens == hit and r.max_abs_logit_diff < 1e-4 and r.greedy_match


def test_engine_refuses_nothing_it_should_fit(tiny_model):
    e = PagedEngine(tiny_model, 1 + 2 * 13)
    req, hit = e.admit("X", random_tokens(200))
    assert hit == 0 and len(e.table(req)) == 13
