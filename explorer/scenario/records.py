"""What one op made the core decide, as typed records in the order the core reported them.

The observer (explorer/core/kv_cache_observer.py) reports each decision where vLLM makes it;
`StepRecorder` turns every report into one frozen record below and appends it to a single list,
so a `Step` holds one ordered tuple and a panel selects the kinds it draws (``step.of(Touched)``)
instead of the step carrying one field per kind. Keeping the order also keeps what separate
tuples lost: which pop belongs to which allocation, which drop to which lookup.

A full-pool step holds thousands of block records (a pop, a cache and a free per block) and a
replay keeps every step, so the records are slotted dataclasses (no per-instance dict) and a
per-block record holds ints and bytes only. `AdmissionCheck` and `GroupLookup` are the core's
own report objects, recorded as they are. None of this is in the replay JSON (design section
5); `record_to_json` writes any record generically, for tools and tests.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, TypeAlias

from explorer.core.events import to_json_value
from explorer.core.hashing import external_block_hash
from explorer.core.kv_cache_observer import AdmissionCheck, GroupLookup

# Every record kind is importable from here, the core's two included.
__all__ = [
    "RECORD_TYPES",
    "AdmissionCheck",
    "CacheCall",
    "CachedBlock",
    "DraftsVerified",
    "EagleDropped",
    "Freed",
    "GroupLookup",
    "HashedBlock",
    "Lookup",
    "Popped",
    "Record",
    "Retention",
    "SkippedFreed",
    "Touched",
    "record_to_json",
]


@dataclasses.dataclass(frozen=True, slots=True)
class HashedBlock:
    """A block hash the request learned (its tokens became known), with its extra keys; the
    replay computes these after the op (they are the request's, not a core decision)."""

    index: int  # block index within the request
    start: int
    end: int
    hash: bytes
    extra_keys: tuple[Any, ...] | None

    @property
    def external(self) -> int:
        return external_block_hash(self.hash)


@dataclasses.dataclass(frozen=True, slots=True)
class Lookup:
    """get_computed_blocks: the walk from block 0, capped at max_cache_hit_length (num_tokens - 1)."""

    request_id: str  # the request looked up (an engine step looks up each waiting request it admits)
    num_tokens: int
    cap_blocks: int  # how many hashes may be probed
    probes: tuple[tuple[int, bool, int | None], ...]  # (block index, hit, block id), group 0's
    hit_tokens: int
    skipped: str | None = None  # why there was no lookup


@dataclasses.dataclass(frozen=True, slots=True)
class EagleDropped:
    """EAGLE dropped the last hit block (``block_index``, held by ``block_id``) from the
    request's lookup (spec part 2, rule 74); recorded just before that lookup's `Lookup`."""

    request_id: str
    block_index: int
    block_id: int


@dataclasses.dataclass(frozen=True, slots=True)
class Touched:
    """BlockPool.touch: a hit block's ref_cnt went up by 1; ``from_free``: it was 0, so the
    block left the free queue."""

    block_id: int
    from_free: bool


@dataclasses.dataclass(frozen=True, slots=True)
class Popped:
    """get_new_blocks popped ``block_id`` from the free-queue head for the request whose
    allocate_slots check came before it (every group's pops, and a connector's external
    blocks); ``evicted_hash``: the hash it lost (an eviction), None if it held none."""

    request_id: str
    block_id: int
    evicted_hash: bytes | None


@dataclasses.dataclass(frozen=True, slots=True)
class CacheCall:
    """One group's cache_blocks: blocks full within ``num_tokens`` tokens get a hash, after
    ``num_cached_blocks`` that already had one."""

    group_id: int
    num_tokens: int
    num_cached_blocks: int


@dataclasses.dataclass(frozen=True, slots=True)
class CachedBlock:
    """cache_full_blocks gave block ``index`` of a request (held by ``block_id``) its hash."""

    block_id: int
    index: int
    hash: bytes
    duplicate_of: tuple[int, ...]  # other blocks already cached under this hash
    group_id: int = 0  # the KV cache group whose cache_blocks call cached it


@dataclasses.dataclass(frozen=True, slots=True)
class Freed:
    """free_blocks dropped the block's ref_cnt (the request's blocks are freed last first)."""

    block_id: int
    ref_cnt: int  # after the free
    to: str  # "front", "back" or "held" (still used by another request)


@dataclasses.dataclass(frozen=True, slots=True)
class SkippedFreed:
    """remove_skipped_blocks freed these blocks of a window group, wholly below the window."""

    request_id: str
    group_id: int
    block_ids: tuple[int, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class Retention:
    """A window group's retention for one cache_blocks call: block ``start_block + i`` gets a
    hash iff ``mask[i]``; ``retention_interval`` None is dense; ``boundaries`` are the replay
    ends and the shared-prefix boundary whose tails are kept."""

    request_id: str
    group_id: int
    start_block: int
    mask: tuple[bool, ...]
    retention_interval: int | None
    boundaries: tuple[int, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class DraftsVerified:
    """Drafts a step verified for a request: ``num_accepted`` of ``num_drafts`` accepted, the
    rest rolled back to ``num_computed_tokens`` (``placeholders``: an admission's padding)."""

    request_id: str
    num_drafts: int
    num_accepted: int
    placeholders: bool
    num_computed_tokens: int

    @property
    def num_rejected(self) -> int:
        return self.num_drafts - self.num_accepted


Record: TypeAlias = (
    HashedBlock
    | Lookup
    | EagleDropped
    | AdmissionCheck
    | Touched
    | Popped
    | CacheCall
    | CachedBlock
    | Freed
    | SkippedFreed
    | Retention
    | DraftsVerified
    | GroupLookup
)
# the union's members, in its order: the list of kinds is written once, above
RECORD_TYPES: tuple[type[Record], ...] = typing.get_args(Record)


def record_to_json(record: Record) -> dict[str, Any]:
    """``{"type": class name, field: value, ...}`` in field order, from the dataclass fields,
    so a new kind needs no writer of its own: bytes as lowercase hex (as the replay JSON writes
    hashes), tuples as lists, nested dataclasses (a GroupLookup's calls) written the same way."""
    return {"type": type(record).__name__, **_fields_json(record)}


def _fields_json(obj: Any) -> dict[str, Any]:
    return {f.name: _json_value(getattr(obj, f.name)) for f in dataclasses.fields(obj)}


def _json_value(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _fields_json(value)
    if isinstance(value, (list, tuple)):  # walked here: they may hold dataclasses
        return [_json_value(v) for v in value]
    return to_json_value(value)  # bytes as hex, as the replay JSON writes them
