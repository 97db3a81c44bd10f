"""The routing policies and the prefix-aware router's cost.

The router never looks inside an engine: it tokenizes the request, hashes it with its own
`HashContext` and request block hasher, converts its hashes to the form the events carry (the
low 64 bits as ints by default), and reads, per instance, the multiset of block hashes the
subscriber rebuilt from the events.

- ``prefix``: for every instance ``cost = blocks to prefill + load_weight x requests in
  flight``, where the blocks to prefill are the prompt's full blocks (capped, like vLLM's
  lookup, so the last token always runs) minus the longest run of the router's hashes that the
  instance is known to hold. Lowest cost wins; ``tie_break`` settles ties.
- ``round_robin``: instance ``k mod n`` for the k-th routed request.
- ``least_loaded``: fewest requests in flight (then the lowest index).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from explorer.core.hashing import BlockHash, HashContext, external_block_hash
from explorer.core.kv_cache_utils import find_cached_prefix, get_request_block_hasher
from explorer.core.request import Request
from explorer.errors import BadInput
from explorer.router.config import TIE_BREAKS

HASH_FORMS = ("int64", "digest")


@dataclass
class Decision:
    instance: int
    matches: list[int]  # matched blocks per instance (capped)
    costs: list[float]
    tied: list[int]
    prompt_blocks: int  # hashable blocks the lookup may cover


class PrefixRouter:
    """Hashes requests as vLLM would, reads the subscriber's per-instance hash multisets, and
    picks the instance with the lowest ``blocks to prefill + load_weight x requests in flight``."""

    def __init__(
        self,
        block_size: int,
        ctx: HashContext,
        hash_form: str = "int64",
        load_weight: float = 0.0,
        tie_break: str = "least_loaded",
        rng_seed: int = 0,
    ) -> None:
        if hash_form not in HASH_FORMS:
            raise BadInput(f"hash form must be one of {', '.join(HASH_FORMS)}, got {hash_form!r}")
        if tie_break not in TIE_BREAKS:
            raise BadInput(f"tie_break must be one of {', '.join(TIE_BREAKS)}, got {tie_break!r}")
        self.block_size = block_size
        self.ctx = ctx
        self.hash_form = hash_form
        self.load_weight = load_weight
        self.tie_break = tie_break
        self._hasher = get_request_block_hasher(block_size, ctx)
        self._rng = random.Random(f"tie-{rng_seed}")
        self._cursor = 0

    def block_hashes(self, tokens: Sequence[int], cache_salt: str | None = None) -> list[BlockHash]:
        """The request's chain, by the same request block hasher an engine runs."""
        return list(Request("router", tokens, self._hasher, cache_salt=cache_salt).block_hashes)

    def keys(self, hashes: Sequence[BlockHash]) -> list[int | bytes]:
        """The hashes in the form the router compares with event hashes."""
        if self.hash_form == "int64":
            return [external_block_hash(h) for h in hashes]
        return [bytes(h) for h in hashes]

    def request_keys(self, tokens: Sequence[int], cache_salt: str | None = None) -> tuple[list[int | bytes], int]:
        """(keys, cap): the keys, and how many blocks a lookup may hit (never the last token)."""
        keys = self.keys(self.block_hashes(tokens, cache_salt))
        return keys, min(len(keys), (len(tokens) - 1) // self.block_size)

    @staticmethod
    def match(keys: Sequence[int | bytes], view: Mapping[Any, int] | None, cap: int) -> int:
        """The longest run of ``keys[:cap]`` present in ``view``."""
        if not view:
            return 0
        return len(find_cached_prefix(keys[:cap], lambda k: view.get(k) or None))

    def choose(
        self, keys: Sequence[int | bytes], cap: int, views: Sequence[Mapping[Any, int] | None], loads: Sequence[int]
    ) -> Decision:
        matches = [self.match(keys, v, cap) for v in views]
        costs = [(cap - m) + self.load_weight * load for m, load in zip(matches, loads)]
        best = min(costs)
        tied = [i for i, c in enumerate(costs) if c <= best + 1e-9]
        return Decision(self._break_tie(tied, loads), matches, costs, tied, cap)

    def _break_tie(self, tied: list[int], loads: Sequence[int]) -> int:
        if len(tied) == 1:
            choice = tied[0]
        elif self.tie_break == "least_loaded":
            choice = min(tied, key=lambda i: (loads[i], i))
        elif self.tie_break == "lowest_index":
            choice = tied[0]
        elif self.tie_break == "random":
            choice = self._rng.choice(tied)
        else:  # round_robin: the first tied instance at or after the cursor
            n = len(loads)
            choice = min(tied, key=lambda i: (i - self._cursor) % n)
        self._cursor = (choice + 1) % len(loads)
        return choice


def choose_instance(
    policy: str,
    router: PrefixRouter,
    keys: Sequence[int | bytes],
    cap: int,
    views: Sequence[Mapping[Any, int] | None],
    loads: Sequence[int],
    routed: int,
) -> tuple[int, list[int]]:
    """(instance, the router's matched blocks per instance) for a request under ``policy``;
    ``routed`` is how many requests were routed before it. Every policy computes the matches,
    so what the router would have known compares across policies."""
    if policy == "prefix":
        d = router.choose(keys, cap, views, loads)
        return d.instance, d.matches
    matches = [router.match(keys, v, cap) for v in views]
    if policy == "round_robin":
        return routed % len(views), matches
    return min(range(len(views)), key=lambda i: (loads[i], i)), matches
