"""Self-test of the vLLM oracle: known facts of vLLM 0.31.0 through the driver.

The numbers are those the shared reference demo asserts against vLLM's
classes (new blocks [1, 2, 3, 4], the free order after a free, the 32-token
hit, the num_tokens - 1 cap, the eviction order, refused and accepted
resets), plus hashes recomputed here by hand from the spec. None of this
needs our own engine.
"""

from __future__ import annotations

import hashlib
import pickle

import cbor2
import pytest
import xxhash

from tests.conformance import answer_cache
from tests.conformance.oracle import VllmOracle, VllmOracleError, compare

BS = 16
A = list(range(1000, 1050))  # 50 tokens: 3 full blocks + 2
B = A[:32] + list(range(2000, 2020))  # shares A's first 2 blocks
C = A[:48]  # block aligned, every block cached after A
P = list(range(5000, 5000 + 62 * BS))  # needs 62 of the 63 real blocks

SHA_NONE_HASH = "066b1e8987e027138e98701c46128929378935f9b6cd1549105ae6b4f0d71198"


# ---- hashing by hand (spec section 1-2) ------------------------------------

HASH_FNS = {
    "sha256": lambda x: hashlib.sha256(pickle.dumps(x, protocol=5)).digest(),
    "sha256_cbor": lambda x: hashlib.sha256(cbor2.dumps(x, canonical=True)).digest(),
    "xxhash": lambda x: xxhash.xxh3_128_digest(pickle.dumps(x, protocol=5)),
    "xxhash_cbor": lambda x: xxhash.xxh3_128_digest(cbor2.dumps(x, canonical=True)),
}


def chain(tokens, algo="sha256", seed="vllm-none-hash", extra=None):
    """Block hashes of every full block: fn((parent, tuple(tokens), extra))."""
    fn = HASH_FNS[algo]
    parent = fn(seed)
    out = []
    for i in range(len(tokens) // BS):
        keys = extra[i] if extra else None
        parent = fn((parent, tuple(tokens[i * BS : (i + 1) * BS]), keys))
        out.append(parent)
    return out


def ext(digest: bytes) -> int:
    """The 64-bit event hash: the digest's last 8 bytes, big-endian."""
    return int.from_bytes(digest[-8:], "big")


# ---- scenario building -----------------------------------------------------


def engine(**kw):
    eng = {
        "block_size": BS,
        "num_blocks": 64,
        "max_model_len": 4096,
        "hash_algo": "sha256",
        "hash_seed": "vllm-none-hash",
        "enable_prefix_caching": True,
        "events": True,
        "int_block_hashes": True,
    }
    eng.update(kw)
    return eng


def arrive(rid, prompt, **kw):
    op = {
        "op": "arrive",
        "id": rid,
        "prompt": list(prompt),
        "lora": None,
        "cache_salt": None,
        "mm": [],
        "prompt_logprobs": False,
    }
    op.update(kw)
    return op


def admit(rid, tokens=None):
    return {"op": "admit", "id": rid, "tokens": tokens}


def op(name, rid, **kw):
    return {"op": name, "id": rid, **kw}


def reset(running=False):
    return {"op": "reset", "running": running}


def check_shape(result, ops):
    """Section-5 shape: per-op fields present exactly where they belong."""
    assert set(result) == {"steps", "final"}
    assert len(result["steps"]) == len(ops)
    for step, o in zip(result["steps"], ops):
        assert step["op"] == o["op"]
        assert step["id"] == (None if o["op"] == "reset" else o["id"])
        assert isinstance(step["ok"], bool) and isinstance(step["events"], list)
        assert ("hit_tokens" in step) == (o["op"] == "admit")
        assert ("new_block_ids" in step) == (o["op"] in ("admit", "decode", "generate"))
    final = result["final"]
    assert set(final) == {
        "free_queue",
        "blocks",
        "cached",
        "requests",
        "stats",
        "reset_ok",
        "none_hash",
        "hash_seed",
        "vllm",  # the release the driver ran (design section 15)
    }
    assert set(final["stats"]) == {
        "requests",
        "queries",
        "hits",
        "preempted_requests",
        "preempted_queries",
        "preempted_hits",
    }
    # free queue + in-use blocks = every real block
    blocks = final["blocks"]
    assert [b["id"] for b in blocks] == list(range(1, len(blocks) + 1))
    free = [b["id"] for b in blocks if b["ref_cnt"] == 0]
    assert sorted(final["free_queue"]) == free


# ---- the demo's walk through vLLM ---------------------------------------------

DEMO_OPS = [
    arrive("A", A),
    admit("A"),
    op("finish", "A"),  # 0-2
    arrive("B", B),
    admit("B"),
    op("finish", "B"),  # 3-5
    arrive("P", P),
    admit("P"),  # 6-7
    reset(),  # 8: refused
    op("finish", "P"),
    reset(),  # 9-10
]


@pytest.fixture(scope="module")
def demo(vllm_oracle):
    """Replay every prefix of the demo, to read the state after each op."""
    return {k: vllm_oracle.replay({"engine": engine(), "ops": DEMO_OPS[:k]}) for k in (2, 3, 5, len(DEMO_OPS))}


def test_request_a_allocates_and_stores(demo):
    ha = chain(A)
    step = demo[2]["steps"][1]
    assert (step["ok"], step["hit_tokens"]) == (True, 0)
    assert step["new_block_ids"] == [1, 2, 3, 4]
    assert step["events"] == [
        {
            "type": "BlockStored",
            "block_hashes": [ext(h) for h in ha],
            "parent_block_hash": None,
            "token_ids": A[:48],
            "block_size": 16,
            "lora_id": None,
            "medium": "GPU",
            "lora_name": None,
            "extra_keys": [None, None, None],
            "group_idx": 0,
            "kv_cache_spec_kind": "full_attention",
        }
    ]
    final = demo[2]["final"]
    assert final["none_hash"] == SHA_NONE_HASH
    assert final["hash_seed"] == "vllm-none-hash"
    assert final["requests"] == {
        "A": {
            "block_ids": [1, 2, 3, 4],
            "num_computed_tokens": 50,
            "block_hashes": [h.hex() for h in ha],
        }
    }
    assert final["blocks"][:5] == [
        {"id": 1, "ref_cnt": 1, "hash": ha[0].hex()},
        {"id": 2, "ref_cnt": 1, "hash": ha[1].hex()},
        {"id": 3, "ref_cnt": 1, "hash": ha[2].hex()},
        {"id": 4, "ref_cnt": 1, "hash": None},  # the partial block is never hashed
        {"id": 5, "ref_cnt": 0, "hash": None},
    ]
    assert final["cached"] == {ha[0].hex(): [1], ha[1].hex(): [2], ha[2].hex(): [3]}
    assert final["free_queue"] == list(range(5, 64))
    check_shape(demo[2], DEMO_OPS[:2])


def test_free_order_after_finishing_a(demo):
    result = demo[3]
    assert result["steps"][2]["events"] == []  # freeing emits nothing
    # unhashed tail to the front, hashed blocks to the back in reverse order
    assert result["final"]["free_queue"] == [4] + list(range(5, 64)) + [3, 2, 1]
    assert result["final"]["requests"] == {}
    assert all(b["ref_cnt"] == 0 for b in result["final"]["blocks"])


def test_request_b_hits_32(demo):
    ha, hb = chain(A), chain(B)
    assert hb[:2] == ha[:2]
    step = demo[5]["steps"][4]
    assert (step["hit_tokens"], step["new_block_ids"]) == (32, [4, 5])  # 4 reused first
    (ev,) = step["events"]
    assert ev["type"] == "BlockStored"
    assert ev["block_hashes"] == [ext(hb[2])]
    assert ev["parent_block_hash"] == ext(ha[1])  # chained to the hit
    assert ev["token_ids"] == B[32:48]
    assert demo[5]["final"]["stats"] == {
        "requests": 2,
        "queries": 102,
        "hits": 32,
        "preempted_requests": 0,
        "preempted_queries": 0,
        "preempted_hits": 0,
    }


def test_eviction_order_and_resets(demo):
    ha, hb = chain(A), chain(B)
    result = demo[len(DEMO_OPS)]
    steps = result["steps"]
    check_shape(result, DEMO_OPS)
    # P takes 5, 6..63, 3, 4, 2 from the head: evicts A#2, B#2, A#1 in that order
    p = steps[7]
    assert p["ok"] and p["hit_tokens"] == 0
    assert p["new_block_ids"] == list(range(5, 64)) + [3, 4, 2]
    removed = [e for e in p["events"] if e["type"] == "BlockRemoved"]
    assert removed == [
        {"type": "BlockRemoved", "block_hashes": [ext(h)], "medium": "GPU", "group_idx": 0}
        for h in (ha[2], hb[2], ha[1])
    ]
    assert [e["type"] for e in p["events"]] == ["BlockRemoved"] * 3 + ["BlockStored"]
    assert len(p["events"][-1]["block_hashes"]) == 62
    # refused while P holds blocks; accepted after the free, one AllBlocksCleared
    assert (steps[8]["ok"], steps[8]["events"]) == (False, [])
    assert steps[9]["events"] == []
    assert (steps[10]["ok"], steps[10]["events"]) == (True, [{"type": "AllBlocksCleared"}])
    final = result["final"]
    assert final["reset_ok"] == [False, True]
    assert final["cached"] == {}
    assert all(b["hash"] is None and b["ref_cnt"] == 0 for b in final["blocks"])
    # P freed in reverse, all hashed, appended behind block 1; reset keeps order
    assert final["free_queue"] == [1, 2, 4, 3] + list(range(63, 4, -1))
    # stats are totals over the replay: the reset does not clear them
    assert final["stats"]["requests"] == 3
    assert final["stats"]["queries"] == 50 + 52 + 62 * 16
    assert final["stats"]["hits"] == 32


def test_block_aligned_prompt_hit_is_capped(vllm_oracle):
    ops = DEMO_OPS[:6] + [arrive("C", C), admit("C")]
    result = vllm_oracle.replay({"engine": engine(), "ops": ops})
    step = result["steps"][-1]
    assert step["hit_tokens"] == 32  # num_tokens - 1 = 47, floored to a block
    assert result["final"]["stats"] == {
        "requests": 3,
        "queries": 150,
        "hits": 64,
        "preempted_requests": 0,
        "preempted_queries": 0,
        "preempted_hits": 0,
    }
    # tokens 32..47 are recomputed into a fresh block (5, the free queue's
    # unhashed head) and cached again: a duplicate key, one more BlockStored
    hc = chain(C)
    assert step["new_block_ids"] == [5]
    (ev,) = step["events"]
    assert (ev["block_hashes"], ev["parent_block_hash"]) == ([ext(hc[2])], ext(hc[1]))
    assert result["final"]["cached"][hc[2].hex()] == [3, 5]
    check_shape(result, ops)


# ---- every op: chunks, generate, preempt, reset with running ----------------


def test_chunks_generate_preempt_and_running_reset(vllm_oracle):
    gen = list(range(7000, 7016))
    ops = [
        arrive("A", A),
        admit("A", tokens=20),  # 1: first chunk
        admit("A"),  # 2: the rest, no lookup
        op("generate", "A", tokens=gen),  # 3: 16 tokens, last one pending
        op("preempt", "A"),  # 4
        admit("A"),  # 5: resumed: lookup over prompt + output
        reset(running=True),  # 6
    ]
    result = vllm_oracle.replay({"engine": engine(), "ops": ops})
    check_shape(result, ops)
    steps = result["steps"]
    full = A + gen
    h = chain(full)
    assert len(h) == 4  # 66 tokens: 4 full blocks
    assert (steps[1]["hit_tokens"], steps[1]["new_block_ids"]) == (0, [1, 2])
    assert steps[1]["events"][0]["block_hashes"] == [ext(h[0])]
    assert (steps[2]["hit_tokens"], steps[2]["new_block_ids"]) == (0, [3, 4])
    assert steps[2]["events"][0]["block_hashes"] == [ext(h[1]), ext(h[2])]
    assert steps[2]["events"][0]["parent_block_hash"] == ext(h[0])
    # block 4 of the chain fills with generated tokens; a 5th block is needed
    # only for the step that computes token 64
    assert steps[3]["ok"] and steps[3]["new_block_ids"] == [5]
    (stored,) = steps[3]["events"]
    assert stored["block_hashes"] == [ext(h[3])]
    assert stored["parent_block_hash"] == ext(h[2])
    assert stored["token_ids"] == full[48:64]
    assert steps[4]["events"] == []
    # resumed: 66 tokens, hit capped at 65 -> 64; the unhashed block 5 is reused
    assert (steps[5]["hit_tokens"], steps[5]["new_block_ids"]) == (64, [5])
    assert steps[6]["ok"] and steps[6]["events"] == [{"type": "AllBlocksCleared"}]
    final = result["final"]
    assert final["reset_ok"] == [True]
    assert final["requests"] == {"A": {"block_ids": [], "num_computed_tokens": 0, "block_hashes": [x.hex() for x in h]}}
    assert final["stats"] == {
        "requests": 1,
        "queries": 50,
        "hits": 0,
        "preempted_requests": 1,
        "preempted_queries": 66,
        "preempted_hits": 64,
    }


def test_failed_allocation_changes_nothing(vllm_oracle):
    ops = [arrive("A", list(range(64))), admit("A")]
    result = vllm_oracle.replay({"engine": engine(num_blocks=4), "ops": ops})
    step = result["steps"][1]
    assert (step["ok"], step["hit_tokens"], step["new_block_ids"], step["events"]) == (False, 0, [], [])
    final = result["final"]
    assert final["free_queue"] == [1, 2, 3]
    assert final["requests"]["A"]["num_computed_tokens"] == 0
    assert final["stats"]["requests"] == 0  # not admitted: not counted


# ---- hash algorithms ---------------------------------------------------------------


@pytest.mark.parametrize("algo", sorted(HASH_FNS))
def test_hash_algorithms_match_the_spec(vllm_oracle, algo):
    seed = "0" if algo.startswith("xxhash") else "vllm-none-hash"
    ops = [arrive("A", A), admit("A")]
    result = vllm_oracle.replay({"engine": engine(hash_algo=algo, hash_seed=seed, int_block_hashes=False), "ops": ops})
    final = result["final"]
    assert final["hash_seed"] == seed
    assert final["none_hash"] == HASH_FNS[algo](seed).hex()
    h = chain(A, algo, seed)
    assert final["requests"]["A"]["block_hashes"] == [x.hex() for x in h]
    # int hashes off: events carry the digests as hex
    assert result["steps"][1]["events"][0]["block_hashes"] == [x.hex() for x in h]


def test_xxhash_seed_vector(vllm_oracle):
    # spec test vector: xxhash NONE_HASH with PYTHONHASHSEED=0
    ops = [arrive("A", A), admit("A"), op("finish", "A"), arrive("B", B), admit("B")]
    result = vllm_oracle.replay({"engine": engine(hash_algo="xxhash", hash_seed="0"), "ops": ops})
    assert result["final"]["none_hash"] == "6fb31cc38bba6066183f7f2104b9c051"
    assert result["steps"][4]["hit_tokens"] == 32
    assert all(len(k) == 32 for k in result["final"]["cached"])  # 16-byte digests
    ev = result["steps"][1]["events"][0]
    assert ev["block_hashes"] == [ext(x) for x in chain(A, "xxhash", "0")]


# ---- LoRA, multimodal, cache salt, prompt logprobs -------------------------------


def test_lora_mm_salt_and_prompt_logprobs(vllm_oracle):
    lora = {"name": "sql", "id": 1, "path": "loras/sql"}
    mm = [{"id": "img-1", "offset": 5, "length": 20}]
    prompt = list(range(300, 340))  # 2 full blocks + 8
    common = dict(lora=lora, mm=mm, cache_salt="s1")
    ops = [
        arrive("A", prompt, **common),
        admit("A"),
        arrive("B", prompt, prompt_logprobs=True, **common),
        admit("B"),  # no lookup: prompt logprobs skip reading the cache
        op("sample", "B", tokens=[1, 2]),
        op("decode", "B"),
    ]
    result = vllm_oracle.replay({"engine": engine(), "ops": ops})
    check_shape(result, ops)
    extra = [
        (("lora", "sql", "loras/sql"), ("mm", "img-1", 5), ("cache_salt", "s1")),
        (("lora", "sql", "loras/sql"), ("mm", "img-1", -11)),
    ]
    h = chain(prompt, extra=extra)
    steps = result["steps"]
    (ev,) = steps[1]["events"]
    assert ev["block_hashes"] == [ext(x) for x in h]
    assert (ev["lora_id"], ev["lora_name"]) == (1, "sql")
    # event extra keys: tags and the LoRA path dropped, mm as (id, offset)
    assert ev["extra_keys"] == [["sql", ["img-1", 5], "s1"], ["sql", ["img-1", -11]]]
    assert (steps[3]["ok"], steps[3]["hit_tokens"], steps[3]["new_block_ids"]) == (True, 0, [4, 5, 6])
    # B still writes: its blocks are cached again under the same keys
    assert steps[3]["events"][0]["block_hashes"] == [ext(x) for x in h]
    final = result["final"]
    assert final["cached"] == {h[0].hex(): [1, 4], h[1].hex(): [2, 5]}
    assert final["stats"]["requests"] == 1 and final["stats"]["queries"] == 40
    assert steps[5]["ok"] and steps[5]["new_block_ids"] == []
    # decode computes every pending token: 40 prompt + 2 sampled
    assert final["requests"]["B"]["num_computed_tokens"] == 42


# ---- caching off, errors, the helper itself ---------------------------------------


def test_caching_off(vllm_oracle):
    ops = [arrive("A", A), admit("A"), op("finish", "A"), arrive("B", A), admit("B")]
    result = vllm_oracle.replay({"engine": engine(enable_prefix_caching=False, hash_seed=None), "ops": ops})
    check_shape(result, ops)
    final = result["final"]
    assert (final["none_hash"], final["hash_seed"], final["cached"]) == (None, None, {})
    assert final["requests"]["B"]["block_hashes"] == []
    assert result["steps"][4]["hit_tokens"] == 0
    assert all(s["events"] == [] for s in result["steps"])
    assert final["stats"]["requests"] == 0  # no lookup, nothing recorded


def test_vllm_error_is_reported_and_driver_survives(vllm_oracle, monkeypatch):
    monkeypatch.setenv(answer_cache.MODE_ENV, "live")  # the driver process itself is under test
    bad = {"engine": engine(hash_algo="md5"), "ops": [arrive("A", A)]}
    answer = vllm_oracle.replay(bad, allow_error=True)
    assert "Unsupported hash function" in answer["error"]
    ok = vllm_oracle.replay({"engine": engine(), "ops": [arrive("A", A)]})
    assert ok["final"]["requests"]["A"]["num_computed_tokens"] == 0


def test_missing_venv_fails_loudly(tmp_path):
    oracle = VllmOracle(python=tmp_path / "no-such-python")
    with pytest.raises(VllmOracleError, match="setup_vllm.sh"):
        oracle.replay({"engine": engine(), "ops": []})


def test_compare_reports_field_paths():
    ours = {
        "steps": [{"op": "admit", "ok": True, "events": [{"type": "BlockStored", "x": 1}]}],
        "final": {"free_queue": [1, 2, 3], "cached": {"aa": [1]}, "stats": {"hits": 1}},
    }
    same = {
        "final": {"stats": {"hits": 1}, "cached": {"aa": [1]}, "free_queue": [1, 2, 3]},
        "steps": [{"events": [{"x": 1, "type": "BlockStored"}], "ok": True, "op": "admit"}],
    }
    assert compare(ours, same) == []
    theirs = {
        "steps": [{"op": "admit", "ok": 1, "events": [{"type": "BlockStored", "x": 2}]}],
        "final": {"free_queue": [1, 3, 2], "cached": {"bb": [1]}, "stats": {"hits": 1}},
    }
    diffs = compare(ours, theirs)
    assert any(d.startswith("steps[0].ok:") for d in diffs)
    assert any(d.startswith("steps[0].events[0].x: ours 1 != vllm 2") for d in diffs)
    assert any(d.startswith("final.free_queue:") and "[1]" in d for d in diffs)
    assert any(d.startswith("final.cached.aa: only in ours") for d in diffs)
    assert any(d.startswith("final.cached.bb: missing in ours") for d in diffs)
    assert len(diffs) == 5


def test_compare_is_json_strict_about_booleans_and_not_about_number_forms():
    # the texts differ in both cases; only the walk decides: true is not 1, 1.0 is 1
    assert compare({"ok": True, "n": [1]}, {"ok": 1, "n": [1]}) == ["ok: ours true != vllm 1"]
    assert compare({"n": 1.0, "m": [2.0]}, {"n": 1, "m": [2]}) == []


# The driver's own checks (vectors, refusals, recorded answers) are 0.31.0's: pinned to it.
@pytest.fixture(scope="module")
def vllm_oracle(vllm_oracles):
    from tests.conformance.oracle import RELEASES, VllmOracle

    return vllm_oracles.get(VllmOracle, RELEASES[0])


def test_missing_033_venv_fails_loudly(tmp_path):
    """The second release's oracle is as mandatory as the first: a missing venv fails."""
    oracle = VllmOracle(python=tmp_path / "no-such-python", vllm="0.33.0")
    with pytest.raises(VllmOracleError, match="0.33.0 oracle not installed.*setup_vllm_033.sh"):
        oracle.replay({"engine": engine(), "ops": []})


def test_each_release_keeps_its_own_vllm_cache():
    """Both releases name their model-info file after the model class: sharing one cache root,
    each driver start of one release would find the other's file stale and re-inspect the model
    in a subprocess (the step that fails under load). Each venv keeps its own root."""
    from tests.conformance.oracle import RELEASES, VENV_PYTHONS, vllm_env

    roots = {vllm_env(VENV_PYTHONS[r])["VLLM_CACHE_ROOT"] for r in RELEASES}
    assert len(roots) == len(RELEASES)
    assert all(str(VENV_PYTHONS[r].parent.parent) in vllm_env(VENV_PYTHONS[r])["VLLM_CACHE_ROOT"] for r in RELEASES)


UNSETTLED_DRIVER = """\
import json, sys
for line in sys.stdin:
    print(json.dumps({"error": "1 validation error for ModelConfig: Model architectures "
                               "['LlamaForCausalLM'] failed to be inspected"}), flush=True)
"""


def test_an_answer_vllm_could_not_settle_is_asked_again_then_refused(tmp_path, monkeypatch):
    """A driver that can never build vLLM's configs is restarted UNSETTLED_RETRIES times, then the
    oracle fails loudly: such an answer is never passed off as vLLM refusing the scenario."""
    import sys

    from tests.conformance import oracle as oracle_module

    driver = tmp_path / "unsettled_driver.py"
    driver.write_text(UNSETTLED_DRIVER)
    monkeypatch.setattr(oracle_module.time, "sleep", lambda _s: None)
    starts = []
    oracle = VllmOracle(python=sys.executable)
    oracle.driver = driver
    real_start = oracle._start
    monkeypatch.setattr(oracle, "_start", lambda: (starts.append(1), real_start())[1])
    with pytest.raises(VllmOracleError, match="could not build its configs in 4 driver processes"):
        oracle.replay_many([{"engine": engine(), "ops": []}])
    oracle.close()
    assert len(starts) == oracle_module.UNSETTLED_RETRIES + 1
