"""Blocks, the free queue, and the request block hasher (vllm/v1/core/kv_cache_utils.py).

Line references are to vLLM 0.31.0.
"""

from __future__ import annotations

import bisect
import copy
import hashlib
import pickle
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, cast

from explorer.core.errors import ConfigError
from explorer.core.hashing import BlockHash, BlockHashWithGroupId, HashContext, sha256

if TYPE_CHECKING:
    from explorer.core.request import Request


@dataclass(slots=True, eq=False)
class KVCacheBlock:
    """Metadata of one KV cache block (kv_cache_utils.py:175-238).

    ``eq=False``: blocks compare by identity, which is all the pool needs.
    """

    block_id: int
    ref_cnt: int = 0
    # The hash-map key (digest + group id); set only while the block is cached.
    _block_hash: BlockHashWithGroupId | None = None
    # Links of the intrusive free list; only FreeKVCacheBlockQueue touches them.
    prev_free_block: KVCacheBlock | None = None
    next_free_block: KVCacheBlock | None = None
    # Block 0: a placeholder that is never handed out or cached.
    is_null: bool = False
    # The prefix length the hash stands for (a partial tail entry's is inside the block).
    block_hash_num_tokens: int | None = None

    @property
    def block_hash(self) -> BlockHashWithGroupId | None:
        return self._block_hash

    def set_block_hash(self, block_hash: BlockHashWithGroupId, num_tokens: int | None = None) -> None:
        assert self._block_hash is None, "The block already has a hash."
        self._block_hash = block_hash
        self.block_hash_num_tokens = num_tokens

    def reset_hash(self) -> None:
        """Drop the hash when the block is evicted or the cache is reset."""
        self._block_hash = None
        self.block_hash_num_tokens = None

    def __repr__(self) -> str:
        h = self._block_hash.hex()[:8] if self._block_hash else None
        return f"KVCacheBlock(id={self.block_id}, ref_cnt={self.ref_cnt}, hash={h})"

    def __deepcopy__(self, memo: dict[int, Any]) -> KVCacheBlock:
        """A copy without its free-list links (the explorer's addition, for a replay's
        checkpoints): the queue's own copy links its blocks again, so a copy never recurses
        along a list of thousands of blocks. A hash is bytes, shared."""
        new = KVCacheBlock(
            self.block_id, self.ref_cnt, self._block_hash, None, None, self.is_null, self.block_hash_num_tokens
        )
        memo[id(self)] = new
        return new


class FreeKVCacheBlockQueue:
    """The free blocks as an intrusive doubly linked list (kv_cache_utils.py:246-496).

    A deque cannot remove from the middle in O(1), and a cache hit on a free block must do
    exactly that (``touch``). The links live in the blocks themselves, so no list node is
    allocated. Two sentinels (id -1) remove the empty-list branches. The head is the next
    block to be handed out, and so the next cached block to be evicted.
    """

    def __init__(self, blocks: list[KVCacheBlock]) -> None:
        self.num_free_blocks = len(blocks)
        self.fake_free_list_head = KVCacheBlock(block_id=-1)
        self.fake_free_list_tail = KVCacheBlock(block_id=-1)
        prev = self.fake_free_list_head
        for block in blocks:
            prev.next_free_block = block
            block.prev_free_block = prev
            prev = block
        prev.next_free_block = self.fake_free_list_tail
        self.fake_free_list_tail.prev_free_block = prev

    def popleft(self) -> KVCacheBlock:
        first = self.fake_free_list_head.next_free_block
        if first is self.fake_free_list_tail or first is None:
            raise ValueError("No free blocks available")
        self._unlink(first)
        return first

    def popleft_n(self, n: int) -> list[KVCacheBlock]:
        if n == 0:
            return []
        if n > self.num_free_blocks:
            raise ValueError(f"Cannot pop {n} blocks: only {self.num_free_blocks} are free")
        out: list[KVCacheBlock] = []
        curr = _link(self.fake_free_list_head.next_free_block)
        for _ in range(n):
            out.append(curr)
            nxt = _link(curr.next_free_block)
            curr.prev_free_block = curr.next_free_block = None
            curr = nxt
        self.fake_free_list_head.next_free_block = curr
        curr.prev_free_block = self.fake_free_list_head
        self.num_free_blocks -= n
        return out

    def remove(self, block: KVCacheBlock) -> None:
        """Unlink a block from anywhere in the queue in O(1)."""
        if block.prev_free_block is None or block.next_free_block is None:
            raise RuntimeError(f"remove() called on a block that is not free: {block}")
        self._unlink(block)

    def _unlink(self, block: KVCacheBlock) -> None:
        prev, nxt = _link(block.prev_free_block), _link(block.next_free_block)
        prev.next_free_block = nxt
        nxt.prev_free_block = prev
        block.prev_free_block = block.next_free_block = None
        self.num_free_blocks -= 1

    def append(self, block: KVCacheBlock) -> None:
        self.append_n([block])

    def append_n(self, blocks: Sequence[KVCacheBlock]) -> None:
        """Add blocks at the tail, keeping their order (the last one becomes the tail)."""
        if not blocks:
            return
        last = _link(self.fake_free_list_tail.prev_free_block)
        for block in blocks:
            block.prev_free_block = last
            last.next_free_block = block
            last = block
        last.next_free_block = self.fake_free_list_tail
        self.fake_free_list_tail.prev_free_block = last
        self.num_free_blocks += len(blocks)

    def prepend_n(self, blocks: Sequence[KVCacheBlock]) -> None:
        """Add blocks at the head, keeping their order (``blocks[0]`` becomes the head)."""
        if not blocks:
            return
        first = _link(self.fake_free_list_head.next_free_block)
        prev = self.fake_free_list_head
        for block in blocks:
            block.prev_free_block = prev
            prev.next_free_block = block
            prev = block
        prev.next_free_block = first
        first.prev_free_block = prev
        self.num_free_blocks += len(blocks)

    def __deepcopy__(self, memo: dict[int, Any]) -> FreeKVCacheBlockQueue:
        """The same queue over copies of its blocks (see KVCacheBlock.__deepcopy__), walked
        once from sentinel to sentinel."""
        chain: list[KVCacheBlock] = []
        curr: KVCacheBlock | None = self.fake_free_list_head
        while curr is not None:
            chain.append(copy.deepcopy(curr, memo))
            curr = curr.next_free_block
        for a, b in zip(chain, chain[1:]):
            a.next_free_block, b.prev_free_block = b, a
        new = object.__new__(FreeKVCacheBlockQueue)
        new.num_free_blocks = self.num_free_blocks
        new.fake_free_list_head, new.fake_free_list_tail = chain[0], chain[-1]
        memo[id(self)] = new
        return new

    def get_all_free_blocks(self) -> list[KVCacheBlock]:
        """Every free block, head (next out) to tail."""
        out: list[KVCacheBlock] = []
        curr = _link(self.fake_free_list_head.next_free_block)
        while curr is not self.fake_free_list_tail:
            out.append(curr)
            curr = _link(curr.next_free_block)
        return out


def _link(block: KVCacheBlock | None) -> KVCacheBlock:
    """A neighbour inside the list: never None between the two sentinels."""
    assert block is not None, "free list link broken"
    return block


# ---- extra keys: generate_block_hash_extra_keys and its parts (kv_cache_utils.py:499-681) ----


def _gen_mm_extra_hash_keys(request: Request, start: int, end: int) -> list[tuple[Any, ...]]:
    """One ``("mm", identifier, offset - start)`` per multimodal item overlapping [start, end).

    The offset is relative to the block start, so it is negative for an item that began in an
    earlier block. Items are sorted by offset and do not overlap, so their ends are sorted too
    and the overlapping ones form one contiguous run, found by bisection.
    """
    feats = request.mm_features
    if not feats:
        return []
    lo = bisect.bisect_right(request.mm_ends, start)  # first item ending after start
    keys = []
    for f in feats[lo:]:
        if f.offset >= end:
            break
        keys.append(("mm", f.identifier, f.offset - start))
    return keys


def generate_block_hash_extra_keys(request: Request, start: int, end: int) -> tuple[Any, ...] | None:
    """The extra keys of block [start, end): LoRA, then images, then cache_salt (first block
    only), each tagged with its source; None when there are none (kv_cache_utils.py:614-652).
    Prompt embeddings, the fourth kind, are not modelled.
    """
    keys: list[Any] = []
    if request.lora_request is not None:
        # The path is included: re-pointing a name at another adapter must not reuse KV.
        keys.append(("lora", request.lora_request.lora_name, request.lora_request.lora_path))
    keys.extend(_gen_mm_extra_hash_keys(request, start, end))
    if start == 0 and request.cache_salt:
        keys.append(("cache_salt", request.cache_salt))
    return tuple(keys) if keys else None


def to_event_extra_keys(extra_keys: Iterable[tuple[Any, ...] | None] | None) -> list[tuple[Any, ...] | None] | None:
    """Strip the tags for KV events: an image key becomes (identifier, offset), any other key
    its bare value (the LoRA path is dropped). One entry per block; None if there are none."""
    if not extra_keys:
        return None
    out = [None if keys is None else tuple(k[1:] if k[0] == "mm" else k[1] for k in keys) for keys in extra_keys]
    return out or None


def hash_block_tokens(
    ctx: HashContext,
    parent_block_hash: BlockHash | None,
    curr_block_token_ids: Sequence[int],
    extra_keys: tuple[Any, ...] | None = None,
) -> BlockHash:
    """hash_fn((parent, tuple(tokens), extra_keys)); a falsy parent means NONE_HASH."""
    if not parent_block_hash:
        parent_block_hash = ctx.none_hash
    return BlockHash(ctx.hash_fn((parent_block_hash, tuple(curr_block_token_ids), extra_keys)))


class RequestBlockHasher:
    """The function ``get_request_block_hasher`` returns (kv_cache_utils.py:836-895): called with a
    request, the hashes of its full blocks not hashed yet, chained from the last known hash.

    ``without_extra_keys`` is the explorer's addition for the miss reason ``other_keys``: the same
    chain with no LoRA, multimodal or cache-salt keys (the token ids alone, and 0.33's lookahead
    tokens), so two requests with the same token ids under other keys meet on one identity."""

    __slots__ = ("block_size", "ctx", "lookahead")

    def __init__(self, block_size: int, ctx: HashContext, num_hash_lookahead_tokens: int = 0) -> None:
        self.block_size = block_size
        self.ctx = ctx
        self.lookahead = num_hash_lookahead_tokens

    def __call__(self, request: Request) -> list[BlockHash]:
        known = request.block_hashes
        return self._hash(request, len(known), known[-1] if known else None, True)

    def without_extra_keys(self, request: Request, known: Sequence[BlockHash]) -> list[BlockHash]:
        """The chain without extra keys, for the full blocks after the ``known`` ones."""
        return self._hash(request, len(known), known[-1] if known else None, False)

    def _hash(self, request: Request, num_known: int, parent: BlockHash | None, keys: bool) -> list[BlockHash]:
        block_size, ctx, la = self.block_size, self.ctx, self.lookahead
        start = num_known * block_size
        tokens = request.all_token_ids
        limit = len(tokens) - la
        new_hashes: list[BlockHash] = []
        if not la and (not keys or not _has_extra_keys(request)):
            # No block has extra keys: the same hashes without a per-block key walk, and the
            # default sha256 inlined (a long trace replay hashes millions of blocks here).
            return _hash_plain(ctx, parent, tokens, start, limit, block_size)
        while start + block_size <= limit:
            end = start + block_size
            extra: Any = generate_block_hash_extra_keys(request, start, end + la) if keys else None
            if la:
                extra = (extra, *tokens[end : end + la])
            parent = hash_block_tokens(ctx, parent, tokens[start:end], extra)
            new_hashes.append(parent)
            start = end
        return new_hashes


def _has_extra_keys(request: Request) -> bool:
    """Whether any block of the request can have extra keys (generate_block_hash_extra_keys)."""
    return request.lora_request is not None or bool(request.mm_features) or bool(request.cache_salt)


def _hash_plain(
    ctx: HashContext, parent: BlockHash | None, tokens: Sequence[int], start: int, limit: int, block_size: int
) -> list[BlockHash]:
    """The chained hashes of the full blocks in [start, limit) when every block's extra keys
    are None: hash_block_tokens block by block, the loop and (for sha256) the hash inlined."""
    prev: bytes = parent or ctx.none_hash  # hash_block_tokens: a falsy parent means NONE_HASH
    out: list[bytes] = []
    append = out.append
    if ctx.hash_fn is sha256:
        dumps, digest, proto = pickle.dumps, hashlib.sha256, pickle.HIGHEST_PROTOCOL  # as hashing.sha256
        while start + block_size <= limit:
            end = start + block_size
            prev = digest(dumps((prev, tuple(tokens[start:end]), None), protocol=proto)).digest()
            append(prev)
            start = end
        return cast("list[BlockHash]", out)  # BlockHash is a NewType of bytes
    hash_fn = ctx.hash_fn
    while start + block_size <= limit:
        end = start + block_size
        prev = hash_fn((prev, tuple(tokens[start:end]), None))
        append(prev)
        start = end
    return cast("list[BlockHash]", out)


def get_request_block_hasher(
    block_size: int, ctx: HashContext, num_hash_lookahead_tokens: int = 0
) -> RequestBlockHasher:
    """A function that hashes every full block of a request not hashed yet, chained from the
    last known hash (kv_cache_utils.py:836-895). A partial tail gets no hash; it is hashed when
    sampled tokens fill it.

    With ``num_hash_lookahead_tokens`` L > 0 (vLLM 0.33's EAGLE lookahead hashes,
    kv_cache_utils.py:975-1018 in 0.33.0) a block is hashed only once the L tokens after it
    exist, and its extra keys become ``(E, *those tokens)``, E being the extra keys of the block
    and its lookahead window together: the drafter's KV at the block's last position depends on
    them."""
    if block_size < 1:
        # vLLM's config never lets 0 through; here it would make the hasher loop forever.
        raise ConfigError(f"block size must be a positive integer, got {block_size!r}")
    return RequestBlockHasher(block_size, ctx, num_hash_lookahead_tokens)


K = TypeVar("K")
V = TypeVar("V")


def find_cached_prefix(
    keys: Iterable[K], lookup: Callable[[K], V | None], on_probe: Callable[[int, V | None], None] | None = None
) -> list[V]:
    """The longest-prefix walk: look the keys up from the first and stop at the first miss.

    Block hashes chain (each one hashes its parent), so once one block misses no later block
    can hit: the walk never needs to look further (FullAttentionManager.find_longest_cache_hit,
    single_type_kv_cache_manager.py:747-843). ``lookup`` gives the cached value of a key or
    None; ``on_probe(index, value or None)`` hears each probe, the final miss included. Every
    longest-prefix question in the explorer (the manager's lookup, the router's view of an
    instance, the trace replay's LRU) walks here.
    """
    hits: list[V] = []
    for key in keys:
        value = lookup(key)
        if on_probe is not None:
            on_probe(len(hits), value)
        if value is None:
            break
        hits.append(value)
    return hits


class BlockHashListWithBlockSize(Sequence[BlockHash]):
    """The request's hashes seen at a coarser block size (kv_cache_utils.py:2841-2911): hashes
    chain, so the fine hash at the end of a coarse block fingerprints that block's whole
    prefix and is its hash. With hash block 16 and block 32: [A, B, C, D] reads as [B, D]."""

    def __init__(self, block_hashes: Sequence[BlockHash], hash_block_size: int, block_size: int) -> None:
        assert block_size % hash_block_size == 0
        self.block_hashes = block_hashes
        self.scale_factor = block_size // hash_block_size

    def __len__(self) -> int:
        return len(self.block_hashes) // self.scale_factor

    def __getitem__(self, idx: Any) -> Any:
        if isinstance(idx, slice):
            return [self[i] for i in range(*idx.indices(len(self)))]
        if idx < 0:
            idx += len(self)
        if not 0 <= idx < len(self):
            raise IndexError(idx)
        return self.block_hashes[(idx + 1) * self.scale_factor - 1]


def resolve_block_hashes(
    block_hashes: Sequence[BlockHash], hash_block_size: int, block_size: int
) -> Sequence[BlockHash]:
    """The hashes at ``block_size``: the list itself when the sizes agree, else the coarse view."""
    if block_size == hash_block_size:
        return block_hashes
    return BlockHashListWithBlockSize(block_hashes, hash_block_size, block_size)
