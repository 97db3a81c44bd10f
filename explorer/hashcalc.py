"""Exact vLLM block hashes for given tokens: the engine of `explorer hash` and the calculator page."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from explorer.core.errors import BadInput, ConfigError
from explorer.core.events import to_json_value
from explorer.core.hashing import external_block_hash, init_none_hash, make_block_hash_with_group_id
from explorer.core.kv_cache_utils import generate_block_hash_extra_keys, get_request_block_hasher, resolve_block_hashes
from explorer.core.request import LoRARequest, MultiModalFeature, Request
from explorer.extra_keys import check_extra_keys

MAX_HASH_BLOCKS = 1 << 18  # full blocks one table may list (262,144: a 4M-token prompt at block size 16)


def check_table_size(num_tokens: int, block_size: int) -> None:
    """BadInput when ``num_tokens`` make more full blocks than one table lists (checked before
    a token spec is expanded, and again by `block_hash_table`)."""
    if num_tokens // block_size > MAX_HASH_BLOCKS:
        raise BadInput(
            f"{num_tokens:,} tokens at block size {block_size} make {num_tokens // block_size:,} full blocks, "
            f"more than the {MAX_HASH_BLOCKS:,} one table lists"
        )


def _check_text(value: str | None, what: str) -> None:
    """A lone surrogate (say from a command-line argument that is not UTF-8) cannot be hashed by
    the CBOR hashes nor sent in an event: bad input for every algorithm alike."""
    if value is None:
        return
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise BadInput(f"{what}: not valid Unicode text (a lone surrogate at character {e.start})") from None


def block_hash_table(
    tokens: Sequence[int],
    block_size: int = 16,
    algo: str = "sha256",
    hash_seed: str | None = None,
    lora: LoRARequest | None = None,
    cache_salt: str | None = None,
    mm: Sequence[MultiModalFeature] = (),
    group_id: int = 0,
    group_block_size: int | None = None,
) -> dict[str, Any]:
    """The JSON of design section 4 (`hash`): every full block with its digest, group-id key,
    64-bit event hash and tagged extra keys. With ``group_block_size`` (design section 8, spec
    part 2 rule 69) the tokens are hashed at ``block_size`` (the engine's hash_block_size) and
    listed as a group with larger blocks sees them: each block's hash is the fine hash at its
    end, and its extra keys are those its BlockStored carries."""
    if not isinstance(block_size, int) or block_size < 1:
        raise ConfigError(f"block size must be a positive integer, got {block_size}")
    if group_block_size is not None and (group_block_size < 1 or group_block_size % block_size):
        raise ConfigError(
            f"group block size {group_block_size} is not a multiple of the hash block size {block_size} "
            "(vLLM asserts every group's block size is)"
        )
    if not 0 <= group_id < 2**32:
        raise ConfigError(f"group id must be in [0, 2**32), got {group_id}")
    check_table_size(len(tokens), block_size)
    check_extra_keys(len(tokens), block_size, (lora.lora_name, lora.lora_path) if lora else None, cache_salt, mm)
    _check_text(hash_seed, "hash seed")
    _check_text(cache_salt, "cache salt")
    if lora is not None:
        _check_text(lora.lora_name, "LoRA name")
        _check_text(lora.lora_path, "LoRA path")
    for f in mm:
        _check_text(f.identifier, "image id")
    ctx = init_none_hash(algo, hash_seed)
    req = Request("hash", tokens, get_request_block_hasher(block_size, ctx), lora, cache_salt or None, mm)
    blocks = []
    size = group_block_size or block_size
    for i, h in enumerate(resolve_block_hashes(req.block_hashes, block_size, size)):
        start, end = i * size, (i + 1) * size
        extra = generate_block_hash_extra_keys(req, start, end)
        blocks.append(
            {
                "index": i,
                "tokens": [start, end],
                "hash": h.hex(),
                "key": make_block_hash_with_group_id(h, group_id).hex(),
                "external": external_block_hash(h),
                "extra_keys": None if extra is None else to_json_value(list(extra)),
            }
        )
    out: dict[str, Any] = {"algo": algo, "hash_seed": ctx.hash_seed, "none_hash": ctx.none_hash.hex()}
    if group_block_size is not None:
        out.update(hash_block_size=block_size, group_block_size=group_block_size)
    out["blocks"] = blocks
    return out
