"""`replay`: Mooncake traces through the engine (design section 4), sweeps and simulators."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from explorer.cli import main as cli_main
from explorer.core.hashing import init_none_hash
from explorer.core.kv_cache_utils import get_request_block_hasher
from explorer.core.request import Request
from explorer.errors import BadInput
from explorer.trace_replay import (
    MAX_TRACE_BYTES,
    ConcurrencyConfig,
    PromptHasher,
    TraceRequest,
    expand_prompt,
    expand_tokens,
    is_skipped,
    load_trace,
    output_block_hashes,
    parse_sizes,
    parse_trace_bytes,
    prepare,
    replay_concurrent,
    replay_vllm,
    replay_vllm_plain,
    run_sweep,
    shipped_trace_path,
    simulate_lru,
    simulate_unbounded,
)

REPO = Path(__file__).resolve().parent.parent
CONTRACT_KEYS = {
    "block_size",
    "num_blocks",
    "requests",
    "skipped",
    "prompt_tokens",
    "hit_tokens",
    "hit_rate",
    "tokens_per_s",
}


def line(ids, n, out=1, ts=0):
    return json.dumps({"timestamp": ts, "input_length": n, "output_length": out, "hash_ids": ids})


def write(tmp_path: Path, lines, name="t.jsonl") -> Path:
    p = tmp_path / name
    p.write_text("\n".join(lines) + "\n")
    return p


def trace_of(lines) -> object:
    return parse_trace_bytes(("\n".join(lines) + "\n").encode(), "t.jsonl")


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    rc = cli_main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


# ---- expansion and skip rule ------------------------------------------------------------------


def test_expansion_token_j_of_block_i():
    req = TraceRequest(1, 0, 600, 1, (3, 7))
    toks = expand_prompt(req)
    assert len(toks) == 600
    assert toks[:512] == list(range(3 * 512, 4 * 512))
    assert toks[512:] == list(range(7 * 512, 7 * 512 + 88))
    assert expand_tokens((3, 7), 500, 520) == toks[500:520]


def test_only_the_ids_the_prompt_reaches_are_kept():
    tr = trace_of([line([1, 2, 3], 512)])
    assert tr.requests[0].hash_ids == (1,)


def test_skip_rule_with_and_without_outputs():
    # 9 usable blocks of 16 tokens = 144 slots.
    a = TraceRequest(1, 0, 128, 17, (0,))  # 128 + 16 = 144 slots: fits exactly
    b = TraceRequest(2, 0, 128, 18, (0,))  # 145 slots: skipped with outputs
    c = TraceRequest(3, 0, 145, 0, (0,))  # 145 prompt tokens: always skipped
    d = TraceRequest(4, 0, 144, 0, (0,))  # output 0 adds nothing
    assert not is_skipped(a, 16, 10, True) and not is_skipped(b, 16, 10, False)
    assert is_skipped(b, 16, 10, True)
    assert is_skipped(c, 16, 10, False) and is_skipped(c, 16, 10, True)
    assert not is_skipped(d, 16, 10, True)


# ---- exact hits, derived by hand ------------------------------------------------------------------

# block size 16, 10 blocks (9 usable). Free queue and evictions, step by step:
#  A [0] 64: 4 new blocks 1-4 (A0..A3), hit 0. Freed tail first: queue 5..9, A3, A2, A1, A0.
#  B [1] 80: 5 new 5-9 (B0..B4), hit 0. Queue A3 A2 A1 A0 B4 B3 B2 B1 B0.
#  C [0] 40: cap 2 blocks; A0, A1 hit = 32. 1 new block: block 4, evicting A3.
#            Its partial block goes to the front: queue 4 A2 B4 B3 B2 B1 B0 A1 A0.
#  D [0] 80: A0 A1 A2 hit, A3 gone = 48. New: block 4, then block 9 (evicts B4).
#  E [1] 80: cap 4 blocks; B0..B3 hit = 64. New: block 9 (evicts D4).
#  F [2, 3] 600: 38 blocks > 9: skipped (counts in prompt tokens, hits 0).
#  G [1] 81: cap 5 blocks; B0..B4 hit = 80. New: the head, block 4 (evicts A3 again).
#  H [0] 80: A0 A1 A2 hit, A3 gone = 48.
HAND = [
    line([0], 64),
    line([1], 80),
    line([0], 40),
    line([0], 80),
    line([1], 80),
    line([2, 3], 600),
    line([1], 81),
    line([0], 80),
]
HAND_HITS = [0, 0, 32, 48, 64, 0, 80, 48]


def test_hand_derived_hits_through_the_engine():
    prep = prepare(trace_of(HAND), 16)
    r = replay_vllm(prep, 10)
    assert r.hits == HAND_HITS
    assert (r.requests, r.skipped, r.prompt_tokens, r.hit_tokens) == (8, 1, 1105, 272)
    # the plain path (each request hashed by the core's request hasher) agrees
    assert replay_vllm_plain(trace_of(HAND), 16, 10).hits == HAND_HITS


def test_cli_json_fields(tmp_path, capsys):
    p = write(tmp_path, HAND)
    rc, out, err = run_cli(capsys, "replay", str(p), "--num-blocks", "10", "--json")
    assert rc == 0, err
    d = json.loads(out)
    assert set(d) == CONTRACT_KEYS
    assert d["block_size"] == 16 and d["num_blocks"] == 10
    assert (d["requests"], d["skipped"], d["prompt_tokens"], d["hit_tokens"]) == (8, 1, 1105, 272)
    assert d["hit_rate"] == pytest.approx(272 / 1105)
    assert d["tokens_per_s"] > 0


def test_cli_limit_and_text_summary(tmp_path, capsys):
    p = write(tmp_path, HAND)
    rc, out, _ = run_cli(capsys, "replay", str(p), "--num-blocks", "10", "--limit", "3", "--json")
    d = json.loads(out)
    assert rc == 0 and d["requests"] == 3 and d["prompt_tokens"] == 184 and d["hit_tokens"] == 32
    rc, out, _ = run_cli(capsys, "replay", str(p), "--num-blocks", "10")
    assert rc == 0 and "hit rate" in out and "24.62%" in out


def test_outputs_pending_last_token_fits_exactly():
    # 128 + 17 outputs: the 17th sampled token is never computed, so 9 blocks suffice.
    tr = trace_of([line([0], 128, out=17), line([0], 128, out=18), line([0], 100, out=5)])
    prep = prepare(tr, 16, outputs=True)
    r = replay_vllm(prep, 10)
    assert r.skipped == 1
    # third request: cap (100-1)//16 = 6 blocks, all cached by the first request
    assert r.hits == [0, 0, 96]


def test_outputs_blocks_are_hashed_like_the_engine():
    """The simulators' output-block hashes are the ones the engine's Request computes."""
    ctx = init_none_hash("sha256", None)
    tr = trace_of([line([5, 6], 530, out=40), line([5], 32, out=1), line([7], 16, out=0)])
    prep = prepare(tr, 16, outputs=True, need_output_hashes=True)
    hasher = get_request_block_hasher(16, ctx)
    for req, ph, oh in zip(tr.requests, prep.prompt_hashes, prep.output_hashes):
        r = Request("x", expand_prompt(req), block_hasher=hasher)
        assert r.block_hashes == ph
        for _ in range(max(req.output_length - 1, 0)):
            r.append_output_token_ids(0)
        assert r.block_hashes == ph + oh
        assert oh == output_block_hashes(req, ph, 16, ctx)


# ---- the shared-hash shortcut is exact --------------------------------------------------------


@pytest.mark.parametrize("block_size", [1, 7, 16, 100, 512, 1000])
def test_prompt_hasher_equals_the_request_hasher(block_size):
    rng = random.Random(block_size)
    ctx = init_none_hash("sha256", None)
    hasher = get_request_block_hasher(block_size, ctx)
    ph = PromptHasher(block_size, ctx)
    # chains that share prefixes, plus an inconsistent trace (id 9 under two parents)
    chains = [[1, 2, 3], [1, 2, 4], [1, 2], [9, 2, 3], [1, 9], [2, 9, 9]]
    reqs = []
    for _ in range(25):
        ids = tuple(rng.choice(chains))
        n = rng.randint(1, 512 * len(ids))
        reqs.append(TraceRequest(1, 0, n, 0, ids[: -(-n // 512)]))
    for req in reqs + reqs:  # the second pass comes from the memo
        expected = Request("x", expand_prompt(req), block_hasher=hasher).block_hashes
        assert ph.prompt_hashes(req) == expected


def test_each_distinct_trace_block_is_hashed_once():
    ctx = init_none_hash("sha256", None)
    ph = PromptHasher(16, ctx)
    for _ in range(3):
        ph.prompt_hashes(TraceRequest(1, 0, 1024, 0, (4, 5)))
    assert ph.blocks_hashed == 64


# ---- sweeps and simulators -----------------------------------------------------------------------


def synthetic_lines(n: int, seed: int = 0) -> list[str]:
    """A trace with heavy prefix sharing: requests extend a few shared chains of ids."""
    rng = random.Random(seed)
    chains = [[rng.randrange(1000)] for _ in range(6)]
    fresh = 1000
    lines = []
    for k in range(n):
        base = list(rng.choice(chains))
        for _ in range(rng.randint(0, 3)):
            base.append(fresh)
            fresh += 1
        if rng.random() < 0.3:
            chains.append(base)
        n_tok = rng.randint(512 * (len(base) - 1) + 1, 512 * len(base))
        lines.append(line(base, n_tok, out=rng.randint(0, 40), ts=10 * k))
    return lines


@pytest.fixture(scope="module")
def shared():
    return trace_of(synthetic_lines(60))


def test_sweep_equals_separate_runs(shared, capsys):
    sizes = [12, 40, 150, 5000]
    sweep = run_sweep(shared, 64, sizes)
    assert sweep.prompt_tokens == shared.prompt_tokens and sweep.requests == 60
    for size, run in zip(sizes, sweep.runs):
        alone = replay_vllm(prepare(shared, 64), size)
        assert (run.num_blocks, run.hit_tokens, run.skipped, run.hits) == (
            size,
            alone.hit_tokens,
            alone.skipped,
            alone.hits,
        )
        assert run.hits == replay_vllm_plain(shared, 64, size).hits
    assert len({r.hit_tokens for r in sweep.runs}) > 1  # the sizes matter here
    # through the command line, on the shipped trace
    path = str(shipped_trace_path())
    rc, out, _ = run_cli(
        capsys, "replay", path, "--limit", "40", "--block-size", "64", "--num-blocks-list", "300,2000,20000", "--json"
    )
    assert rc == 0
    d = json.loads(out)
    assert d["requests"] == 40 and d["prompt_tokens"] == load_trace(path, limit=40).prompt_tokens
    for size, res in zip([300, 2000, 20000], d["results"]):
        rc, one, _ = run_cli(
            capsys, "replay", path, "--limit", "40", "--block-size", "64", "--num-blocks", str(size), "--json"
        )
        single = json.loads(one)
        assert (res["num_blocks"], res["hit_tokens"], res["skipped"]) == (size, single["hit_tokens"], single["skipped"])


@pytest.mark.parametrize("outputs", [False, True])
def test_unbounded_is_the_ceiling(shared, outputs):
    sizes = [12, 40, 150, 600, 100000]
    sweep = run_sweep(shared, 64, sizes, ["vllm", "lru", "unbounded"], outputs=outputs)
    unb = [r for r in sweep.runs if r.policy == "unbounded"]
    assert len(unb) == 1 and unb[0].num_blocks is None and unb[0].skipped == 0
    ceiling = unb[0]
    assert ceiling.hit_tokens > 0
    for r in sweep.runs:
        assert r.hit_tokens <= ceiling.hit_tokens
        assert all(h <= c for h, c in zip(r.hits, ceiling.hits))  # request by request
    by = {(r.policy, r.num_blocks): r for r in sweep.runs}
    for policy in ("vllm", "lru"):
        # a cache that never fills is the ceiling; a small one is below it
        assert by[(policy, 100000)].hits == ceiling.hits
        assert by[(policy, 12)].hit_tokens < ceiling.hit_tokens


def test_lru_small_hand_case():
    # 5 usable blocks of 16. A [0] 64 caches A0..A3 (plain LRU: A0 least recent). B [1] 32
    # caches 2 blocks, one too many: plain LRU evicts A0, the head of A's chain, so C [0] 64
    # hits nothing. vLLM freed A's tail first (queue: 5, A3, A2, A1, A0): B takes block 5
    # and evicts A3, and C hits A0..A2 = 48 tokens (its cap: 63 // 16 = 3 blocks).
    tr = trace_of([line([0], 64), line([1], 32), line([0], 64)])
    prep = prepare(tr, 16)
    assert simulate_lru(prep, 6).hits == [0, 0, 0]
    assert replay_vllm(prep, 6).hits == [0, 0, 48]
    assert simulate_unbounded(prep).hits == [0, 0, 48]


# ---- concurrency ------------------------------------------------------------------------------------


def test_concurrency_shares_running_blocks_and_queues_when_full():
    tr = trace_of(
        [
            line([0], 64, out=10, ts=0),  # A runs 0..200 ms, holds 4 blocks
            line([0], 64, out=1, ts=0),  # B hits A's running blocks: 48; needs 1 new block
            line([1], 64, out=2, ts=50),  # C needs 4 new blocks: waits for A (B ends at 20 ms)
        ]
    )
    prep = prepare(tr, 16)
    r = replay_concurrent(prep, 6, ConcurrencyConfig(decode_ms=20))
    assert r.hits == [0, 48, 0]
    c = r.concurrency
    assert c["peak_running"] == 2
    assert c["max_wait_ms"] == 150.0  # C: arrived 50, admitted at 200
    assert c["last_finish_ms"] == 240.0
    # sequentially B hits the same, and C never waits
    assert replay_vllm(prep, 6).hits == [0, 48, 0]


def test_concurrent_cli(tmp_path, capsys):
    p = write(tmp_path, HAND)
    rc, out, err = run_cli(capsys, "replay", str(p), "--num-blocks", "10", "--concurrent", "--outputs", "--json")
    assert rc == 0, err
    d = json.loads(out)
    assert set(d) >= CONTRACT_KEYS and d["concurrency"]["peak_running"] >= 1 and d["skipped"] == 1


# ---- bad input --------------------------------------------------------------------------------------


def cli(*args, cwd=REPO):
    return subprocess.run([sys.executable, "-m", "explorer", "replay", *args], capture_output=True, text=True, cwd=cwd)


def assert_bad(proc, *needles):
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    for n in needles:
        assert n in lines[0], lines[0]


BAD_LINES = [
    ("{not json", "line 2", "not JSON"),
    ("[1, 2]", "line 2", "JSON object"),
    ('{"timestamp": 0, "input_length": 5, "hash_ids": [1]}', "line 2", "output_length"),
    ('{"input_length": 5, "output_length": 1, "hash_ids": [1]}', "line 2", "timestamp"),
    ('{"timestamp": 0, "input_length": 5, "output_length": 1}', "line 2", "hash_ids"),
    ('{"timestamp": 0, "input_length": -5, "output_length": 1, "hash_ids": [1]}', "line 2", "negative"),
    ('{"timestamp": 0, "input_length": 5, "output_length": -1, "hash_ids": [1]}', "line 2", "negative"),
    ('{"timestamp": 0, "input_length": 0, "output_length": 1, "hash_ids": [1]}', "line 2", "input_length"),
    (
        '{"timestamp": 0, "input_length": 1025, "output_length": 1, "hash_ids": [1, 2]}',
        "line 2",
        "beyond its 2 hash ids",
    ),
    ('{"timestamp": 0, "input_length": 5.5, "output_length": 1, "hash_ids": [1]}', "line 2", "integer"),
    ('{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [-1]}', "line 2", "hash_ids[0]"),
    ('{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": []}', "line 2", "hash_ids"),
    ('{"timestamp": -1, "input_length": 5, "output_length": 1, "hash_ids": [1]}', "line 2", "timestamp"),
    ('{"timestamp": 0, "input_length": 5, "output_length": 2000000, "hash_ids": [1]}', "line 2", "max_model_len"),
]


@pytest.mark.parametrize("bad,where,what", BAD_LINES)
def test_bad_lines_in_process(bad, where, what):
    with pytest.raises(BadInput) as e:
        trace_of([line([0], 10), bad])
    assert where in str(e.value) and what in str(e.value)


@pytest.mark.parametrize("bad,where,what", [BAD_LINES[i] for i in (0, 2, 5, 7, 8)])
def test_bad_lines_exit_2(tmp_path, bad, where, what):
    assert_bad(cli(str(write(tmp_path, [line([0], 10), bad]))), where, what)


def test_empty_file_exit_2(tmp_path):
    p = tmp_path / "empty.jsonl"
    p.write_text("\n  \n")
    assert_bad(cli(str(p)), "empty trace")


def test_binary_file_exit_2(tmp_path):
    p = tmp_path / "blob.jsonl"
    p.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00")
    assert_bad(cli(str(p)), "not a text file")
    p.write_bytes(b'{"a": "\xff\xfe"}\n')
    assert_bad(cli(str(p)), "not a UTF-8 text file")


def test_huge_file_exit_2(tmp_path):
    p = tmp_path / "huge.jsonl"
    with open(p, "wb") as f:
        f.truncate(MAX_TRACE_BYTES + 1)  # sparse: refused before it is read
    assert_bad(cli(str(p)), "limit")
    with pytest.raises(BadInput, match="limit"):
        parse_trace_bytes(b"x" * 101, "upload.jsonl", max_bytes=100)


def test_missing_file_and_bad_options_exit_2(tmp_path):
    assert_bad(cli(str(tmp_path / "nope.jsonl")), "no such file")
    p = write(tmp_path, HAND)
    assert_bad(cli(str(p), "--num-blocks", "1"), "num_blocks")
    assert_bad(cli(str(p), "--num-blocks-list", "100,x"), "'x'")
    assert_bad(cli(str(p), "--policy", "lru", "--concurrent"), "concurrency")
    assert_bad(cli(str(p), "--num-blocks", str(10**9)), "limit")


def test_work_cap(shared):
    with pytest.raises(BadInput, match="larger block size"):
        run_sweep(shared, 1, [100], max_blocks_hashed=10_000)
    assert run_sweep(shared, 64, [100], max_blocks_hashed=10_000).runs[0].num_blocks == 100


def test_parse_sizes():
    assert parse_sizes("1000, 5_000,20000") == [1000, 5000, 20000]
    for bad in ("", "1", "10,10", "a"):
        with pytest.raises(BadInput):
            parse_sizes(bad)


def test_shipped_trace_is_the_documented_one():
    tr = load_trace(shipped_trace_path())
    assert len(tr.requests) == 3993 and tr.prompt_tokens == 61_194_628
    readme = (REPO / "data" / "README.md").read_text()
    assert "kvcache-ai/Mooncake" in readme and "FAST25-release/traces/synthetic_trace.jsonl" in readme
    assert "Apache" in readme


def test_figures_from_a_sweep(shared):
    from explorer.trace_replay import sweep_to_dict
    from explorer.viz.replay import _windowed, hit_rate_vs_cache_size, hits_over_time

    d = sweep_to_dict(run_sweep(shared, 64, [12, 150], ["vllm", "lru", "unbounded"]), per_request=True)
    fig = hit_rate_vs_cache_size(d)
    assert [t.name.split()[0] for t in fig.data] == ["vLLM", "plain", "unbounded"]
    vllm = fig.data[0]
    assert list(vllm.x) == [12, 150]
    assert list(vllm.y) == [r["hit_rate"] for r in d["results"] if r["policy"] == "vllm"]
    assert fig.layout.xaxis.type == "log"
    fig2 = hits_over_time(d, 12, window=10)
    assert len(fig2.data) == 3  # vllm and lru at 12 blocks, and the ceiling
    assert len(fig2.data[0].x) == 60
    assert _windowed([0, 10, 10], [10, 10, 10], 2) == [0.0, 0.5, 1.0]
    json.dumps(d)  # what the worker sends back is JSON


@pytest.mark.parametrize("outputs", [False, True])
def test_concurrency_queue_under_pressure(shared, outputs):
    prep = prepare(shared, 64, outputs=outputs, need_output_hashes=True)
    r = replay_concurrent(prep, 40, ConcurrencyConfig(decode_ms=50))
    c = r.concurrency
    assert c["max_wait_ms"] > 0 and c["peak_running"] >= 2  # requests queued, and overlapped
    ceiling = simulate_unbounded(prep)
    assert all(h <= u for h, u in zip(r.hits, ceiling.hits))  # arrivals are in file order here
    assert r.skipped == replay_vllm(prep, 40).skipped
