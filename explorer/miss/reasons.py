"""The miss reasons of every lookup (design section 14), classified from the core's reports.

`MissTracker` listens to the core (kv_cache_observer.py) and keeps only what a reason needs:
each lookup's hashes and whether each was cached at that moment (for a request with extra keys
the same without them too), the hit, the external tokens, EAGLE's drop, the window group's cut,
the last removal of every hash (a pop for an allocation, a reset, a failed load), the hashes
running requests have not computed yet, and the token ids (hashes without extra keys) that
requests with extra keys cached.
It never reads the core's state: a reason is what the core told, sorted by the rules' order.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import Any

from explorer.core.hashing import BlockHash, BlockHashWithGroupId, make_block_hash_with_group_id
from explorer.core.kv_cache_observer import GroupLookup, KVCacheObserver

# The rules in the order they are tested: a block takes the first that holds.
REASONS = (
    "partial_block",
    "last_token",
    "skipped",
    "behind_miss",
    "window",
    "eagle_drop",
    "not_yet_cached",
    "evicted",
    "reset",
    "failed_load",
    "other_keys",
    "never_cached",
    "other_instance",  # the Router only: another instance held the hash
)
REMOVALS = ("evicted", "reset", "failed_load")


@dataclass(frozen=True, slots=True)
class Removal:
    """A hash's last removal: why, in which op (its index in `steps`), for whose allocation."""

    cause: str
    step: int
    request_id: str | None


# The history of a block that was not removed: cause is the reason it gives when it missed.
_CACHED = Removal("behind_miss", -1, None)
_IN_FLIGHT = Removal("not_yet_cached", -1, None)
_NEVER = Removal("never_cached", -1, None)
_OTHER_KEYS = Removal("other_keys", -1, None)
# An eviction a tracker without records did not keep (it only knows the key was evicted).
_UNRECORDED = Removal("evicted", -1, None)
# An uncached block whose record (an eviction, the only cause so far) is still in the
# tracker's records, read when the lookup's first missed block is known (MissTracker._resolve).
_EVICTED = Removal("evicted", -1, None)


@dataclass(slots=True)
class Miss:
    """One lookup's MISS record: missed tokens by reason, and each full block's reason."""

    request_id: str
    num_tokens: int
    hit_tokens: int
    external_tokens: int
    tokens: dict[str, int]
    block_reasons: tuple[str | None, ...]  # per full block: None where it hit
    first_miss_block: int | None
    first_miss: str | None
    evicted_by: Removal | None

    def to_json(self) -> dict[str, Any]:
        by = self.evicted_by
        return {
            "tokens": dict(self.tokens),
            "first_miss_block": self.first_miss_block,
            "first_miss": self.first_miss,
            "evicted_by": None if by is None else {"step": by.step, "id": by.request_id},
        }


@dataclass(slots=True)
class _Lookup:
    """What the core told about one lookup, until the op ends and it is classified."""

    request_id: str
    num_tokens: int
    skipped: bool = False
    hit_tokens: int = 0
    external_tokens: int = 0
    group_id: int = 0
    # per full block: what it was at the lookup (cached, in flight, its last removal, never)
    history: tuple[Removal, ...] = ()
    eagle_dropped: int | None = None
    full_group_hit_tokens: int | None = None
    # While some history entries are _EVICTED: the hashes and the group's key suffix.
    unresolved: tuple[tuple[BlockHash, ...], bytes] | None = None


class MissTracker(KVCacheObserver):
    """Hears the core and classifies each lookup's miss (`take` after each op)."""

    block_reports = False  # a reason needs no per-block report: a lean replay stays lean

    def __init__(self, block_size: int, records: bool = True) -> None:
        """``records=False``: the caller reads only each miss's tokens by reason, never which
        allocation evicted a block (a trace replay's sweep), so an eviction keeps no record:
        while every removal is an eviction, the evicted keys are a set and ``evicted_by``
        stays None."""
        self.block_size = block_size
        self.step = 0  # the op being replayed (set by the replay)
        self._allocator: str | None = None  # whose allocation pops now
        # Each key's (hash + group id) last removal: a later one overwrites it, and a hash
        # uncached at a lookup was last removed by what this says (or never cached at all).
        self._removed: dict[bytes, Removal] = {}
        # Without records, until a removal of another cause: the keys evictions removed.
        self._evicted: set[bytes] | None = None if records else set()
        self._records = records
        # Requests that looked up and hold blocks: their hashes and how many are computed.
        self._pending: dict[str, tuple[tuple[bytes, ...], int]] = {}
        self._holding: set[str] = set()  # those whose allocation succeeded: running, holding blocks
        self._loading: set[str] = set()  # waiting for a connector's async load: not running yet
        self._lookups: dict[str, _Lookup] = {}
        self._current: _Lookup | None = None
        self._current_hashes: tuple[bytes, ...] = ()
        # other_keys: per group, the hash without extra keys (the token ids) of every block a
        # request with extra keys cached -> the hashes it was cached under.
        self._plain_cached: dict[int, dict[bytes, set[bytes]]] = {}
        self._rare = False  # a reset or a failed load removed hashes: records differ in cause
        self._unresolved: list[_Lookup] = []  # lookups whose _EVICTED entries are not read yet

    # ---- the core's reports ----------------------------------------------------------------

    def on_lookup_skipped(self, request_id: str, num_tokens: int, reason: str) -> None:
        self._lookups[request_id] = _Lookup(request_id, num_tokens, skipped=True)

    def on_lookup_blocks(
        self, request_id: str, group_id: int, block_hashes: tuple[BlockHash, ...], cached: Sequence[bool]
    ) -> None:
        suffix = make_block_hash_with_group_id(BlockHash(b""), group_id)
        evicted = self._evicted
        holding = self._holding
        others = [(hs, done) for rid, (hs, done) in self._pending.items() if rid != request_id and rid in holding]
        plain = self._plain_cached.get(group_id)
        whole = not others and not plain and getattr(cached, "whole_prefixes", False)
        if whole:
            history = _until_never(block_hashes, cached, self._ever(), suffix, self._rare)
        elif evicted is not None:  # no records: every removal so far was an eviction
            history = [
                _CACHED if c else _EVICTED if h + suffix in evicted else _NEVER
                for h, c in zip(block_hashes, cached, strict=True)
            ]
        else:
            # Each block's story so far: cached now, or its last removal, or never cached.
            get = self._removed.get
            history = [_CACHED if c else get(h + suffix, _NEVER) for h, c in zip(block_hashes, cached, strict=True)]
        if others:
            in_flight = {h for hashes, done in others for h in hashes[done:]}
            history = [_IN_FLIGHT if x is not _CACHED and h in in_flight else x for h, x in zip(block_hashes, history)]
        if plain:  # the same token ids cached by a request with other extra keys
            history = [_OTHER_KEYS if x is _NEVER and _other(plain, h, h) else x for h, x in zip(block_hashes, history)]
        self._current = _Lookup(request_id, 0, group_id=group_id, history=tuple(history))
        if whole and history and not self._rare and evicted is None:  # its uncached entries are _EVICTED
            self._current.unresolved = (block_hashes, suffix)
            self._unresolved.append(self._current)
        self._current_hashes = block_hashes
        self._pending[request_id] = (block_hashes, 0)

    def on_lookup_without_extra_keys(
        self, request_id: str, group_id: int, block_hashes: tuple[BlockHash, ...], cached: Sequence[bool]
    ) -> None:
        lookup, own = self._current, self._current_hashes
        if lookup is None or lookup.request_id != request_id:
            return
        suffix = make_block_hash_with_group_id(BlockHash(b""), group_id)
        removed, plain = self._ever(), self._plain_cached.get(group_id, {})
        # A history cut at its first never-cached block: every later one was never cached either.
        history = lookup.history + (_NEVER,) * (len(own) - len(lookup.history))
        # Never cached under its own keys, but its token ids were: cached now or removed since
        # (without keys), or cached by a request with other keys.
        lookup.history = (
            tuple(
                _OTHER_KEYS if x is _NEVER and (c or (p + suffix) in removed or _other(plain, p, h)) else x
                for p, h, c, x in zip(block_hashes, own, cached, history)
            )
            + history[len(block_hashes) :]
        )

    def on_cache_without_extra_keys(
        self,
        request_id: str,
        group_id: int,
        block_hashes: tuple[BlockHash, ...],
        without_extra_keys: tuple[BlockHash, ...],
    ) -> None:
        plain = self._plain_cached.setdefault(group_id, {})
        for h, p in zip(block_hashes, without_extra_keys):
            plain.setdefault(p, set()).add(h)

    def on_eagle_drop(self, group_id: int, block_index: int, block_id: int) -> None:
        if self._current is not None and group_id == self._current.group_id:
            self._current.eagle_dropped = block_index

    def on_lookup(self, request_id: str, num_tokens: int, max_cache_hit_length: int, num_hit_tokens: int) -> None:
        lookup = self._current or _Lookup(request_id, num_tokens)
        lookup.num_tokens = num_tokens
        lookup.hit_tokens = num_hit_tokens
        self._lookups[request_id] = lookup
        self._current = None

    def on_group_lookup(self, lookup: GroupLookup) -> None:
        mine = self._lookups.get(lookup.request_id)
        if mine is not None and not mine.skipped:
            mine.full_group_hit_tokens = lookup.group_hit_tokens[mine.group_id]

    def on_external_lookup(
        self, request_id: str, num_local_tokens: int, num_external_tokens: int | None, load_async: bool
    ) -> None:
        mine = self._lookups.get(request_id)
        if mine is not None:
            mine.external_tokens = num_external_tokens or 0
        if load_async and num_external_tokens:
            self._loading.add(request_id)

    def on_kv_load_done(self, request_id: str, num_computed_tokens: int, failed: bool) -> None:
        self._loading.discard(request_id)

    def on_admission_check(self, check: Any) -> None:
        self._allocator = check.request_id
        if self._unresolved:  # its hit and external tokens are known: so is its first miss
            self._resolve(lambda lk: lk.request_id == check.request_id, True)
        if check.ok and check.request_id not in self._loading:
            self._holding.add(check.request_id)

    def on_cache_blocks(self, request_id: str, group_id: int, num_tokens: int, num_cached_blocks: int) -> None:
        pending = self._pending.get(request_id)
        if pending is not None:
            self._pending[request_id] = (pending[0], max(pending[1], num_tokens // self.block_size))

    def on_hashes_removed(self, keys: tuple[BlockHashWithGroupId, ...], cause: str) -> None:
        if self._unresolved:  # the records change: read every one those lookups stand for
            self._resolve(lambda lk: True, False)
        if self._evicted is not None:
            if cause == "evicted":
                self._evicted.update(keys)
                return
            # The first removal of another cause: from now on a block's cause is read per key.
            self._removed = dict.fromkeys(self._evicted, _UNRECORDED)
            self._evicted = None
        self._rare = self._rare or cause != "evicted"
        removal = Removal(cause, self.step, self._allocator if cause == "evicted" else None)
        self._removed.update(zip(keys, repeat(removal)))  # one record object per call, shared

    def on_prefix_cache_reset(self, keys: tuple[BlockHashWithGroupId, ...]) -> None:
        self.on_hashes_removed(keys, "reset")

    def on_request_freed(self, request_id: str) -> None:
        self._pending.pop(request_id, None)
        self._holding.discard(request_id)
        self._loading.discard(request_id)

    def _ever(self) -> set[bytes] | dict[bytes, Removal]:
        """The keys removed at least once (the evicted ones while no record is kept)."""
        return self._removed if self._evicted is None else self._evicted

    def _resolve(self, which: Any, first_only: bool) -> None:
        """Replace the _EVICTED entries of the unresolved lookups ``which`` selects by their
        records, as they still are: only the first missed block's (``first_only``: the only
        one whose record a MISS shows, evicted_by) or every one."""
        keep = []
        get = self._removed.__getitem__
        for lk in self._unresolved:
            if not which(lk):
                keep.append(lk)
                continue
            assert lk.unresolved is not None
            (hashes, suffix), hist, lk.unresolved = lk.unresolved, lk.history, None
            if not first_only:
                lk.history = tuple(get(h + suffix) if x is _EVICTED else x for h, x in zip(hashes, hist))
                continue
            i = (lk.hit_tokens + lk.external_tokens) // self.block_size
            if i < len(hist) and hist[i] is _EVICTED:
                lk.history = hist[:i] + (get(hashes[i] + suffix),) + hist[i + 1 :]
        self._unresolved = keep

    # ---- the records -------------------------------------------------------------------------

    def take(self) -> dict[str, Miss]:
        """The misses of the lookups reported since the last call, by request id."""
        if self._unresolved:  # no record changed since their lookups
            self._resolve(lambda lk: True, False)
        records = self._records
        out = {rid: classify(lk, self.block_size, records) for rid, lk in self._lookups.items()}
        self._lookups = {}
        return out


def _until_never(
    hashes: tuple[BlockHash, ...],
    cached: Sequence[bool],
    removed: set[bytes] | dict[bytes, Removal],
    suffix: bytes,
    rare: bool,
) -> list[Removal]:
    """Each block's history up to the first never cached (cut there). The group caches whole
    prefixes, so the blocks ever cached (cached now or removed since) are a prefix of the
    chain, found by bisection; the rest were never cached, and nothing else is in flight."""
    lo, hi = 0, len(hashes)  # ever cached below lo, never at hi and above
    while lo < hi:
        mid = (lo + hi) // 2
        if cached[mid] or (hashes[mid] + suffix) in removed:
            lo = mid + 1
        else:
            hi = mid
    if not rare:  # every record is an eviction: which one is read only where a MISS shows it
        return [_CACHED if c else _EVICTED for c in cached[:lo]]
    assert isinstance(removed, dict), "a removal of another cause turns the set into records"
    get = removed.__getitem__
    return [_CACHED if c else get(h + suffix) for h, c in zip(hashes[:lo], cached[:lo])]


def _other(plain: dict[bytes, set[bytes]], token_ids: bytes, own: bytes) -> bool:
    """Whether the blocks with these token ids (hash without extra keys) were cached under
    a hash other than ``own``: under other extra keys."""
    seen = plain.get(token_ids)
    return seen is not None and bool(seen - {own})


def classify(lk: _Lookup, bs: int, records: bool = True) -> Miss:
    """Each missed token's reason: block by block, the first rule that holds (runs of blocks
    at a time: a long prompt's lookup is classified in a few list operations). Without
    ``records`` no Miss says which allocation evicted its first missed block."""
    n = lk.num_tokens
    nb = n // bs
    start = (0 if lk.skipped else lk.hit_tokens) + lk.external_tokens
    c0 = min(start // bs, nb)  # blocks wholly covered by the hit and the external tokens
    first_cap = max(n - 1, 0) // bs  # the lookup cap, in blocks
    reasons: list[str | None] = [None] * c0
    if lk.skipped:
        reasons += ["skipped"] * (nb - c0)
    else:
        cap = min(first_cap, nb)
        hist = lk.history
        known = min(cap, len(hist))  # a history cut at a never-cached block: the rest are too
        mid = [x.cause for x in hist[c0:known]]
        mid += ["never_cached"] * (cap - max(c0, known))
        full_hit = min((lk.full_group_hit_tokens or 0) // bs, cap)
        for i in range(c0, full_hit):
            mid[i - c0] = "window"
        e = lk.eagle_dropped
        if e is not None and c0 <= e < cap:
            mid[e - c0] = "eagle_drop"
        reasons += mid
        reasons += ["last_token"] * (nb - max(c0, cap))
    counts = Counter(reasons[c0:])
    tokens = {r: k * bs for r, k in counts.items() if r is not None}
    if c0 < nb and start > c0 * bs:  # the block the external tokens end inside
        r0 = reasons[c0]
        assert r0 is not None
        tokens[r0] -= start - c0 * bs
    tail_start = max(nb * bs, start)
    if n > tail_start:
        key = "skipped" if lk.skipped else "partial_block"
        tokens[key] = tokens.get(key, 0) + n - tail_start
    ordered = {r: tokens[r] for r in REASONS if tokens.get(r)}
    first_miss_block = c0 if c0 < min(first_cap, nb) else None
    first = (
        reasons[first_miss_block]
        if first_miss_block is not None
        else next(iter(_by_position(reasons, ordered, lk.skipped)), None)
    )
    evicted_by = None
    if first == "evicted" and first_miss_block is not None and records:
        evicted_by = lk.history[first_miss_block]
        assert evicted_by is not _EVICTED, "a first missed block's record was not read"
    return Miss(
        lk.request_id,
        n,
        0 if lk.skipped else lk.hit_tokens,
        lk.external_tokens,
        ordered,
        tuple(reasons),
        first_miss_block,
        first,
        evicted_by,
    )


def _by_position(reasons: list[str | None], tokens: dict[str, int], skipped: bool) -> list[str]:
    """The first missed token's reason when no full block within the cap missed."""
    out = [r for r in reasons if r is not None]
    tail = "skipped" if skipped else "partial_block"
    if tail in tokens:
        out.append(tail)
    return out
