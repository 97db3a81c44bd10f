"""Block hash functions, NONE_HASH and the hash key types (vllm/utils/hashing.py and the top
of vllm/v1/core/kv_cache_utils.py in 0.31.0).

A block hash is ``hash_fn((parent_hash, tuple(token_ids), extra_keys))``:
- ``sha256``: SHA-256 over pickle protocol 5 bytes (32-byte digest);
- ``sha256_cbor``: SHA-256 over canonical CBOR, reproducible outside Python;
- ``xxhash`` / ``xxhash_cbor``: XXH3-128 over the same serialisations (16-byte digest).

The first block of every chain uses NONE_HASH as its parent. vLLM derives it by hashing a seed
*string*: PYTHONHASHSEED when set (for every algorithm), else ``"vllm-none-hash"`` for the
cryptographic algorithms, else 32 random bytes as hex for xxhash (a predictable seed would let
an attacker precompute collisions). Here the seed is a per-engine setting instead of an
environment variable, so two browser sessions never share one.

cbor2 and xxhash are imported where used: a GPU box may run this core with only numpy+torch.
"""

from __future__ import annotations

import hashlib
import os
import pickle
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NewType

from explorer.core.errors import ConfigError

# The raw digest of one block (32 bytes for sha256, 16 for xxhash).
BlockHash = NewType("BlockHash", bytes)
# The hash-map key: digest + 4-byte big-endian KV cache group id.
BlockHashWithGroupId = NewType("BlockHashWithGroupId", bytes)
# What KV events publish: the low 64 bits as an int (the default), or the raw digest.
ExternalBlockHash = bytes | int

HASH_ALGOS = ("sha256", "sha256_cbor", "xxhash", "xxhash_cbor")
DEFAULT_NONE_HASH_SEED = "vllm-none-hash"
# Not collision resistant: without a given seed they draw a secret random one.
NON_CRYPTO_HASH_ALGOS = frozenset({"xxhash", "xxhash_cbor"})


def _pickle(obj: Any) -> bytes:
    return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)


def _cbor(obj: Any) -> bytes:
    import cbor2

    return cbor2.dumps(obj, canonical=True)


def _xxh3_128(data: bytes) -> bytes:
    try:
        import xxhash as _xxhash
    except ImportError as e:  # vLLM raises ModuleNotFoundError here too
        raise ConfigError("the xxhash algorithms need the xxhash package (pip install xxhash)") from e
    return _xxhash.xxh3_128_digest(data)


def sha256(obj: Any) -> bytes:
    return hashlib.sha256(_pickle(obj)).digest()


def sha256_cbor(obj: Any) -> bytes:
    return hashlib.sha256(_cbor(obj)).digest()


def xxhash(obj: Any) -> bytes:
    return _xxh3_128(_pickle(obj))


def xxhash_cbor(obj: Any) -> bytes:
    return _xxh3_128(_cbor(obj))


_HASH_FNS: dict[str, Callable[[Any], bytes]] = {
    "sha256": sha256,
    "sha256_cbor": sha256_cbor,
    "xxhash": xxhash,
    "xxhash_cbor": xxhash_cbor,
}


def get_hash_fn_by_name(name: str) -> Callable[[Any], bytes]:
    try:
        return _HASH_FNS[name]
    except KeyError:
        raise ConfigError(f"unsupported hash algorithm {name!r}: expected one of {', '.join(HASH_ALGOS)}") from None


def resolve_none_hash_seed(algo: str, hash_seed: str | None, urandom: Callable[[int], bytes] = os.urandom) -> str:
    """The seed string NONE_HASH is hashed from. ``hash_seed`` plays PYTHONHASHSEED: None means
    unset (an empty string is a set seed, as it is for vLLM)."""
    get_hash_fn_by_name(algo)
    if hash_seed is not None:
        return hash_seed
    if algo in NON_CRYPTO_HASH_ALGOS:
        return urandom(32).hex()
    return DEFAULT_NONE_HASH_SEED


@dataclass(frozen=True, slots=True)
class HashContext:
    """One engine's hashing setup: what vLLM keeps in module globals, kept per engine here."""

    algo: str
    hash_fn: Callable[[Any], bytes]
    hash_seed: str  # the resolved seed string
    none_hash: BlockHash


def init_none_hash(algo: str = "sha256", hash_seed: str | None = None) -> HashContext:
    """Resolve the seed and derive NONE_HASH = hash_fn(seed string), as vLLM's init_none_hash."""
    hash_fn = get_hash_fn_by_name(algo)
    seed = resolve_none_hash_seed(algo, hash_seed)
    return HashContext(algo, hash_fn, seed, BlockHash(hash_fn(seed)))


def make_block_hash_with_group_id(block_hash: BlockHash, group_id: int) -> BlockHashWithGroupId:
    return BlockHashWithGroupId(block_hash + group_id.to_bytes(4, "big", signed=False))


def get_block_hash(key: BlockHashWithGroupId) -> BlockHash:
    return BlockHash(key[:-4])


def get_group_id(key: BlockHashWithGroupId) -> int:
    return int.from_bytes(key[-4:], "big", signed=False)


def external_block_hash(block_hash: bytes) -> int:
    """The 64-bit event form: the low 64 bits of the big-endian digest (its last 8 bytes)."""
    return int.from_bytes(block_hash, "big") & ((1 << 64) - 1)


def maybe_convert_block_hash(block_hash: BlockHash, use_int: bool) -> ExternalBlockHash:
    """vLLM's conversion for events; ``use_int`` plays VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES."""
    return external_block_hash(block_hash) if use_int else block_hash
