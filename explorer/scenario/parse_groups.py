"""Hybrid KV cache groups in a scenario (design section 8): the `[engine]` keys and the
`expect` keys they bring.

```toml
kv_cache_groups = [{ kind = "full_attention" }, { kind = "sliding_window", sliding_window = 32 }]
prefix_cache_retention_interval = 0   # 0 | "dense" (vLLM's None) | N
hash_block_size = 16                  # default: the GCD of the group block sizes
```
Every refusal vLLM makes (a window that is not a positive integer, a group block size that is
not a multiple of ``hash_block_size``, a retention interval without a window group or off the
scheduler block size) is bad input here, before the replay starts.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from explorer.core.errors import BadInput
from explorer.core.kv_cache_interface import (
    FULL_ATTENTION,
    SLIDING_WINDOW,
    KVCacheSpec,
    check_retention_interval,
)

GROUP_KEYS = ("kv_cache_groups", "prefix_cache_retention_interval", "hash_block_size")
GROUP_EXPECT_KEYS = frozenset({"group_hit_tokens", "shared_prefix_boundary", "new_block_ids_by_group"})
# What each hybrid `expect` key holds: at `admit`, then at `step` (a map keyed by request id).
GROUP_EXPECT_KINDS = {
    "group_hit_tokens": ("an array of integers", "a table of arrays of integers"),
    "shared_prefix_boundary": ("an integer", "a table of integers"),
    "new_block_ids_by_group": ("an array of arrays of integers", "a table of arrays of arrays of integers"),
}
MAX_GROUPS = 8  # every size has a cap: vLLM's hybrid models have two or three kinds
MAX_SCHEDULER_BLOCK_SIZE = 1 << 16


@dataclass(frozen=True)
class GroupsSpec:
    """The hybrid engine keys, validated: the groups, retention (None = dense) and hash block size."""

    groups: tuple[KVCacheSpec, ...]
    retention_interval: int | None = 0
    hash_block_size: int | None = None  # as given; None = the GCD
    raw: Mapping[str, Any] | None = None  # the keys as written, for writing the scenario back

    @property
    def resolved_hash_block_size(self) -> int:
        if len(self.groups) == 1:  # ignored with one group, as in vLLM
            return self.groups[0].block_size
        return self.hash_block_size or math.gcd(*(g.block_size for g in self.groups))

    @property
    def scheduler_block_size(self) -> int:
        return math.lcm(*(g.block_size for g in self.groups))

    def as_dict(self) -> dict[str, Any]:
        return dict(self.raw or {})


E = TypeVar("E")


def hashing_engine(engine: E, groups: GroupsSpec | None) -> E:
    """The engine settings as the hasher sees them: with groups, it hashes at hash_block_size
    (so the scenario's full-block budget counts those hashes)."""
    return engine if groups is None else replace(engine, block_size=groups.resolved_hash_block_size)  # type: ignore[type-var]


def _posint(fail: Callable[[str, str], BadInput], where: str, value: Any, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= hi:
        raise fail(where, f"expected a positive integer (at most {hi:,}), got {value!r}")
    return value


def parse_groups(fail: Callable[[str, str], BadInput], raw: Any, block_size: int, max_block: int) -> GroupsSpec | None:
    """The hybrid keys of ``[engine]`` (None without any of them)."""
    raw = raw if isinstance(raw, Mapping) else {}
    given = {k: raw[k] for k in GROUP_KEYS if k in raw}
    if not given:
        return None
    groups: tuple[KVCacheSpec, ...] = (KVCacheSpec(block_size),)
    if "kv_cache_groups" in given:
        groups = _groups(fail, given["kv_cache_groups"], block_size, max_block)
    ri_raw = given.get("prefix_cache_retention_interval", 0)
    where = "engine.prefix_cache_retention_interval"
    if ri_raw == "dense":
        ri: int | None = None
    elif isinstance(ri_raw, bool) or not isinstance(ri_raw, int) or ri_raw < 0:
        raise fail(where, f'expected 0, "dense" or a positive multiple of the scheduler block size, got {ri_raw!r}')
    else:
        ri = ri_raw
    hbs = None
    if "hash_block_size" in given:
        hbs = _posint(fail, "engine.hash_block_size", given["hash_block_size"], max_block)
    spec = GroupsSpec(groups, ri, hbs, given)
    sbs = spec.scheduler_block_size
    if sbs > MAX_SCHEDULER_BLOCK_SIZE:
        raise fail(
            "engine.kv_cache_groups",
            f"the block sizes' LCM (the scheduler block size) is {sbs:,}, above {MAX_SCHEDULER_BLOCK_SIZE:,}",
        )
    if len(groups) > 1:
        h = spec.resolved_hash_block_size
        bad = [g.block_size for g in groups if g.block_size % h]
        if bad:
            raise fail(
                "engine.hash_block_size",
                f"group block size {bad[0]} is not a multiple of hash_block_size = {h} (vLLM asserts it)",
            )
    try:
        check_retention_interval(ri, sbs, groups)
    except BadInput as e:
        raise fail(where, str(e)) from None
    return spec


def _groups(fail: Callable[[str, str], BadInput], raw: Any, block_size: int, max_block: int) -> tuple[KVCacheSpec, ...]:
    where = "engine.kv_cache_groups"
    if not isinstance(raw, list) or not raw:
        raise fail(where, 'expected a non-empty array of tables like { kind = "full_attention" }')
    if len(raw) > MAX_GROUPS:
        raise fail(where, f"{len(raw)} groups, more than the limit {MAX_GROUPS}")
    out = []
    for i, g in enumerate(raw):
        w = f"{where}[{i}]"
        if not isinstance(g, Mapping):
            raise fail(w, "expected a table { kind = ..., sliding_window = ..., block_size = ... }")
        unknown = set(g) - {"kind", "sliding_window", "block_size"}
        if unknown:
            raise fail(w, f"unknown key {sorted(map(str, unknown))[0]!r} (known: kind, sliding_window, block_size)")
        kind = g.get("kind")
        if kind not in (FULL_ATTENTION, SLIDING_WINDOW):
            raise fail(f"{w}.kind", f'expected "full_attention" or "sliding_window", got {kind!r}')
        bs = _posint(fail, f"{w}.block_size", g.get("block_size", block_size), max_block)
        if kind == FULL_ATTENTION:
            if "sliding_window" in g:
                raise fail(f"{w}.sliding_window", "a full-attention group has no window")
            out.append(KVCacheSpec(bs))
            continue
        if "sliding_window" not in g:
            raise fail(f"{w}.sliding_window", "missing: a sliding-window group needs its window size in tokens")
        window = _posint(fail, f"{w}.sliding_window", g["sliding_window"], 1 << 24)
        out.append(KVCacheSpec(bs, SLIDING_WINDOW, window))
    return tuple(out)


def check_group_expects(fail: Callable[[str, str], BadInput], ops: Sequence[Any], groups: GroupsSpec | None) -> None:
    """Hybrid `expect` keys need `kv_cache_groups`; their values have the kind the op reports."""
    for op in ops:
        for key, value in op.expect.items():
            if key not in GROUP_EXPECT_KEYS:
                continue
            if groups is None:
                raise fail(f"{op.label}: expect.{key}", "only a scenario with kv_cache_groups reports it")
            kind = GROUP_EXPECT_KINDS[key][op.op == "step"]
            if not _has_kind(value, kind):
                raise fail(f"{op.label}: expect.{key}", f"expected {kind}, got {value!r}"[:200])


def _has_kind(value: Any, kind: str) -> bool:
    def integer(x: Any) -> bool:
        return isinstance(x, int) and not isinstance(x, bool)

    def ints(x: Any) -> bool:
        return isinstance(x, list) and all(integer(v) for v in x)

    def lists_of_ints(x: Any) -> bool:
        return isinstance(x, list) and all(ints(v) for v in x)

    one = {"an integer": integer, "an array of integers": ints, "an array of arrays of integers": lists_of_ints}
    if kind in one:
        return one[kind](value)
    inner = {
        "a table of integers": integer,
        "a table of arrays of integers": ints,
        "a table of arrays of arrays of integers": lists_of_ints,
    }[kind]
    return isinstance(value, Mapping) and all(isinstance(k, str) and inner(v) for k, v in value.items())


def refuse_connector(
    fail: Callable[[str, str], BadInput], groups: GroupsSpec | None, has_connector: bool, steps: Sequence[Any]
) -> None:
    """A KV connector runs with any groups (design section 10), but with more than one group a
    load that reports invalid blocks makes vLLM raise (block ids are unique only within a
    group; scheduler.py:3288-3297): `invalid_external_blocks` is bad input there."""
    if not has_connector or groups is None or len(groups.groups) == 1:
        return
    for i, step in enumerate(steps):
        if isinstance(step, Mapping) and "invalid_external_blocks" in step:
            who = f" {step['id']}" if isinstance(step.get("id"), str) and len(step["id"]) <= 40 else ""
            raise fail(
                f"step {i + 1} ({step.get('op')}{who}): invalid_external_blocks",
                "with more than one KV cache group vLLM cannot map a load's invalid blocks back to "
                "requests and raises (a connector must report failed requests instead)",
            )
