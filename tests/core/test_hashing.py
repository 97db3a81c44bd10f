"""Hash functions, NONE_HASH and block keys: spec rules 1-8 and the section 2 test vectors."""

from __future__ import annotations

import hashlib
import pickle
import sys

import cbor2
import pytest
import xxhash as xxhash_mod

from explorer.core import hashing
from explorer.core.errors import ConfigError
from explorer.core.hashing import (
    DEFAULT_NONE_HASH_SEED,
    HASH_ALGOS,
    external_block_hash,
    get_block_hash,
    get_group_id,
    get_hash_fn_by_name,
    init_none_hash,
    make_block_hash_with_group_id,
    resolve_none_hash_seed,
)
from explorer.core.kv_cache_utils import hash_block_tokens

# Section 2 table and "Further vectors" (seeds unset).
VECTORS = {
    "sha256": {
        "none": "066b1e8987e027138e98701c46128929378935f9b6cd1549105ae6b4f0d71198",
        "block0": "fe8fa5dda3210d0ca2031e37cbe3b001186773cd1c710beb2d45fcb51d434798",
        "event0": 3262291359910021016,
        "block1": "8be7aaa33831156d316f1f463ae57e643deb63f42e633e2d631df88815cc4629",
        "salted0": "b74b8848c4b44dc0baf43d1135dd783777a8016db0e723a361860f8df659b6e4",
    },
    "sha256_cbor": {
        "none": "9bd96a485ad84efdafb72ee48a1d7a69bcead0f8f0433173941b276b9581eef0",
        "block0": "dc918a88b139e5afe60b88eda27508d4aee16c10fdc354791efea06206ac0749",
        "event0": 2233398808101521225,
        "block1": "c300ec275d7bf08af8fc63e76cdc0086911bbc7091e03c5cf892553bef84ef0c",
        "salted0": "37a188ca0f395fb17edb7613ec9f0f06e16dd32556cf8209ea1772c6a9134909",
    },
}


@pytest.mark.parametrize("algo", sorted(VECTORS))
def test_vector_none_hash(algo):
    """Section 2 table: NONE_HASH with the seed unset."""
    assert init_none_hash(algo).none_hash.hex() == VECTORS[algo]["none"]


@pytest.mark.parametrize("algo", sorted(VECTORS))
def test_vector_block0_block1_and_event_int(algo):
    """Section 2 table: block 0 = tokens 0..15 with no parent, block 1 chained; event int of block 0."""
    ctx = init_none_hash(algo)
    b0 = hash_block_tokens(ctx, None, list(range(16)))
    b1 = hash_block_tokens(ctx, b0, list(range(16, 32)))
    assert b0.hex() == VECTORS[algo]["block0"]
    assert b1.hex() == VECTORS[algo]["block1"]
    assert external_block_hash(b0) == VECTORS[algo]["event0"]


@pytest.mark.parametrize("algo", sorted(VECTORS))
def test_vector_salted_block0(algo):
    """Further vectors: block 0 with extra_keys=(("cache_salt","s1"),)."""
    ctx = init_none_hash(algo)
    h = hash_block_tokens(ctx, None, list(range(16)), (("cache_salt", "s1"),))
    assert h.hex() == VECTORS[algo]["salted0"]


def test_vector_none_hash_sha256_seed_0():
    """Further vectors: NONE_HASH with PYTHONHASHSEED=0, sha256."""
    expect = "1973e23848344dc43a988a9b478663803cfffe1243480253f9a3cf004b14aa7c"
    assert init_none_hash("sha256", "0").none_hash.hex() == expect


def test_vector_none_hash_xxhash_seed_0():
    """Further vectors: xxhash NONE_HASH with PYTHONHASHSEED=0."""
    assert init_none_hash("xxhash", "0").none_hash.hex() == "6fb31cc38bba6066183f7f2104b9c051"


def test_vector_pickle_bytes():
    """Further vectors: pickle of (NONE_HASH_sha256, (0,1,300), None), BININT1/BININT2, MEMOIZE."""
    none = init_none_hash("sha256").none_hash
    expect = bytes.fromhex(
        "8005953000000000000000"
        + "4320"
        + none.hex()
        + "94"
        + "4b00"
        + "4b01"
        + "4d2c01"
        + "87"
        + "94"
        + "4e"
        + "87"
        + "94"
        + "2e"
    )
    assert pickle.dumps((none, (0, 1, 300), None), protocol=pickle.HIGHEST_PROTOCOL) == expect
    assert hashing.sha256((none, (0, 1, 300), None)) == hashlib.sha256(expect).digest()


def test_vector_cbor_of_seed():
    """Further vectors: CBOR of the seed is 6e followed by "vllm-none-hash"."""
    assert cbor2.dumps(DEFAULT_NONE_HASH_SEED, canonical=True) == b"\x6e" + b"vllm-none-hash"
    assert hashing.sha256_cbor(DEFAULT_NONE_HASH_SEED) == hashlib.sha256(b"\x6evllm-none-hash").digest()


def test_vector_cbor_of_block_tuple():
    """Further vectors: CBOR of (NONE_HASH, (0,1,2), None) is 83 5820 <32 bytes> 83 00 01 02 f6."""
    none = init_none_hash("sha256_cbor").none_hash
    expect = bytes.fromhex("835820") + none + bytes.fromhex("83000102f6")
    assert cbor2.dumps((none, (0, 1, 2), None), canonical=True) == expect
    ctx = init_none_hash("sha256_cbor")
    assert hash_block_tokens(ctx, None, [0, 1, 2]) == hashlib.sha256(expect).digest()


def test_rule_1_sha256_is_sha256_of_pickle_protocol_5():
    """Rule 1: sha256(x) = hashlib.sha256(pickle.dumps(x, HIGHEST_PROTOCOL)).digest(), 32 bytes;
    the pickle bytes begin 80 05 95 <8-byte frame length>."""
    obj = (b"p" * 32, (1, 2, 3), None)
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    assert pickle.HIGHEST_PROTOCOL == 5 and data[:3] == b"\x80\x05\x95"
    assert int.from_bytes(data[3:11], "little") == len(data) - 11  # the frame: everything after it
    out = hashing.sha256(obj)
    assert out == hashlib.sha256(data).digest() and len(out) == 32


def test_rule_2_sha256_cbor_is_sha256_of_canonical_cbor():
    """Rule 2: sha256_cbor(x) = sha256(cbor2.dumps(x, canonical=True)); tuples are arrays,
    bytes a byte string, None 0xf6, str a text string."""
    obj = (b"\x01\x02", (5,), None, "s")
    data = cbor2.dumps(obj, canonical=True)
    assert data == bytes.fromhex("844201028105f66173")
    assert hashing.sha256_cbor(obj) == hashlib.sha256(data).digest()
    assert len(hashing.sha256_cbor(obj)) == 32


def test_rule_3_xxhash_is_xxh3_128_16_bytes():
    """Rule 3: xxhash(x) = xxh3_128_digest(pickle(x)), 16 bytes; xxhash_cbor over canonical CBOR."""
    obj = (b"p", (1, 2), None)
    assert hashing.xxhash(obj) == xxhash_mod.xxh3_128_digest(pickle.dumps(obj, protocol=5))
    assert hashing.xxhash_cbor(obj) == xxhash_mod.xxh3_128_digest(cbor2.dumps(obj, canonical=True))
    assert len(hashing.xxhash(obj)) == 16 and len(hashing.xxhash_cbor(obj)) == 16


def test_rule_3_xxhash_missing_module_is_a_clear_error(monkeypatch):
    """Rule 3: the xxhash module is optional; without it a call fails (here: a typed ConfigError)."""
    monkeypatch.setitem(sys.modules, "xxhash", None)  # makes `import xxhash` raise ImportError
    with pytest.raises(ConfigError, match="xxhash package"):
        hashing.xxhash(b"x")


def test_rule_4_get_hash_fn_by_name_accepts_exactly_four():
    """Rule 4: exactly sha256 | sha256_cbor | xxhash | xxhash_cbor; anything else raises ValueError."""
    assert HASH_ALGOS == ("sha256", "sha256_cbor", "xxhash", "xxhash_cbor")
    for name in HASH_ALGOS:
        assert callable(get_hash_fn_by_name(name))
    for bad in ("md5", "SHA256", "", "sha256 ", "builtin"):
        with pytest.raises(ValueError, match="unsupported hash algorithm"):
            get_hash_fn_by_name(bad)


def test_rule_5_default_algorithm_is_sha256():
    """Rule 5: the default algorithm is sha256 (and prefix caching defaults to on)."""
    from explorer.core.kv_cache_manager import KVCacheManager

    ctx = init_none_hash()
    assert ctx.algo == "sha256" and ctx.none_hash.hex() == VECTORS["sha256"]["none"]
    assert KVCacheManager(4).enable_caching is True


@pytest.mark.parametrize("algo,size", [("sha256", 36), ("sha256_cbor", 36), ("xxhash", 20), ("xxhash_cbor", 20)])
def test_rule_6_key_is_hash_plus_4_byte_big_endian_group_id(algo, size):
    """Rule 6: key = block_hash + group_id.to_bytes(4, "big"): 36 bytes for sha256, 20 for xxhash."""
    ctx = init_none_hash(algo, "seed")
    h = hash_block_tokens(ctx, None, [1, 2, 3])
    key = make_block_hash_with_group_id(h, 258)
    assert len(key) == size and key == h + b"\x00\x00\x01\x02"
    assert get_block_hash(key) == h and get_group_id(key) == 258
    assert get_group_id(make_block_hash_with_group_id(h, 2**32 - 1)) == 2**32 - 1


def test_rule_7_none_hash_is_hash_of_the_seed_string():
    """Rule 7: NONE_HASH = hash_fn(seed string): the seed string itself is pickled or CBOR-encoded."""
    for algo in HASH_ALGOS:
        ctx = init_none_hash(algo, "abc")
        assert ctx.none_hash == get_hash_fn_by_name(algo)("abc")
        assert ctx.hash_seed == "abc"


def test_rule_7_sha256_default_seed_is_vllm_none_hash():
    """Rule 7: unset seed -> sha256 and sha256_cbor use the fixed seed "vllm-none-hash"."""
    for algo in ("sha256", "sha256_cbor"):
        ctx = init_none_hash(algo)
        assert ctx.hash_seed == "vllm-none-hash"
        assert ctx.none_hash == get_hash_fn_by_name(algo)("vllm-none-hash")


def test_rule_7_set_seed_applies_to_every_algorithm():
    """Rule 7: a set seed (PYTHONHASHSEED) is the seed for every algorithm, sha256 included."""
    for algo in HASH_ALGOS:
        assert init_none_hash(algo, "0").hash_seed == "0"
    assert init_none_hash("sha256", "0").none_hash != init_none_hash("sha256").none_hash


def test_rule_7_empty_string_seed_is_a_set_seed():
    """Rule 7: an empty PYTHONHASHSEED is set: it differs from unset."""
    ctx = init_none_hash("sha256", "")
    assert ctx.hash_seed == ""
    assert ctx.none_hash == hashing.sha256("")
    assert ctx.none_hash != init_none_hash("sha256").none_hash
    assert init_none_hash("xxhash", "").hash_seed == ""  # not a random draw


@pytest.mark.parametrize("algo", ["xxhash", "xxhash_cbor"])
def test_rule_7_xxhash_without_seed_draws_a_random_seed(algo):
    """Rule 7: unset seed -> xxhash draws os.urandom(32).hex(): 64 hex chars, new per context,
    and re-using the reported seed reproduces NONE_HASH."""
    a, b = init_none_hash(algo), init_none_hash(algo)
    for ctx in (a, b):
        assert len(ctx.hash_seed) == 64 and all(c in "0123456789abcdef" for c in ctx.hash_seed)
    assert a.hash_seed != b.hash_seed and a.none_hash != b.none_hash
    assert init_none_hash(algo, a.hash_seed).none_hash == a.none_hash


def test_rule_7_resolve_seed_uses_urandom_32_hex():
    """Rule 7: the drawn seed is urandom(32).hex()."""
    assert resolve_none_hash_seed("xxhash", None, urandom=lambda n: bytes(range(n))) == bytes(range(32)).hex()
    assert resolve_none_hash_seed("sha256", None, urandom=lambda n: 1 / 0) == "vllm-none-hash"


def test_rule_8_hash_block_tokens_hashes_the_3_tuple():
    """Rule 8: hash_block_tokens returns fn((parent, tuple(tokens), extra_keys))."""
    ctx = init_none_hash("sha256")
    parent = b"\x07" * 32
    assert hash_block_tokens(ctx, parent, [3, 4], None) == hashing.sha256((parent, (3, 4), None))
    extra = (("lora", "a", "p"),)
    assert hash_block_tokens(ctx, parent, [3, 4], extra) == hashing.sha256((parent, (3, 4), extra))


def test_rule_8_none_and_empty_parent_both_mean_none_hash():
    """Rule 8: `if not parent_block_hash`: None and b"" are both replaced by NONE_HASH."""
    ctx = init_none_hash("sha256")
    want = hashing.sha256((ctx.none_hash, (1, 2), None))
    assert hash_block_tokens(ctx, None, [1, 2]) == want
    assert hash_block_tokens(ctx, b"", [1, 2]) == want
