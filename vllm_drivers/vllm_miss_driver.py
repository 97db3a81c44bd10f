"""Conformance oracle for the miss reasons (design section 14), classified from vLLM's own state.

Runs inside a vLLM virtualenv, like ``vllm_driver.py``, whose manager-level replay it extends
(it never imports ``explorer``). Protocol: the same as vllm_driver.py's; every ``admit`` step
of the answer also carries ``"miss"``: the MISS record of its lookup (None for a later chunk).

Each record is read off vLLM's objects, op by op, never from the explorer's reports:

- before ``get_computed_blocks``: the request's ``block_hashes``, which of them the pool's
  ``cached_block_hash_to_block`` holds for the full-attention group, the hashes the other
  RUNNING requests hold beyond their ``num_computed_tokens``, and what removed each uncached
  hash last (below); ``prefix_cache_lookup_enabled`` says whether the lookup runs at all;
- the pool's own methods, wrapped on the instance: ``_maybe_evict_cached_block`` (a hash whose
  last block left the map: popped for the allocation of the op's request, or dropped by
  ``evict_blocks``), ``reset_prefix_cache`` (every key the map held, when it succeeded) and
  ``cache_full_blocks`` (the token ids of every block vLLM cached, as the request's hashes with
  no extra keys: vLLM's own block hasher over a request with the same token ids and no LoRA,
  images or cache salt), so a block never cached under its own keys can say its token ids were
  cached under other ones (or, for a request with keys, under none: that hash in the map now or
  removed since);
- after the lookup: its hit, the full-attention group's own hit (hybrid: the fixed point's
  cut) and whether EAGLE drops the last block of the cached run.

The reasons are then sorted by the contract's rules, written here from the contract alone.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import vllm_driver as base  # noqa: E402  (redirects stdout; its protocol stream is ours)
from vllm.sampling_params import SamplingParams  # noqa: E402
from vllm.v1.core.kv_cache_utils import make_block_hash_with_group_id  # noqa: E402
from vllm.v1.request import Request, RequestStatus  # noqa: E402


def _has_extra_keys(req: Request) -> bool:
    return req.lora_request is not None or bool(req.mm_features) or bool(req.cache_salt)


class MissReplay(base.Replay):
    """vllm_driver's replay, with every lookup's reasons read from vLLM's state."""

    def __init__(self, scenario: dict):
        super().__init__(scenario)
        self.index = -1  # the op being replayed (its index in `steps`)
        self.allocator: str | None = None  # whose allocation pops now
        self.cause = "evicted"
        self.removed: dict[bytes, tuple[str, int, str | None]] = {}  # key -> its last removal
        # every cached block's hash without extra keys -> the hashes it was cached under
        self.plain_cached: dict[bytes, set[bytes]] = {}
        coordinator = self.mgr.coordinator
        groups = getattr(coordinator, "attention_groups", None)
        self.miss_groups = list(groups[0][1]) if groups else [0]
        drop = getattr(coordinator, "drop_eagle_group_ids", None)
        self.eagle = self.miss_groups[0] in (coordinator.eagle_group_ids if drop is None else drop)
        if self.caching:
            self._watch_pool()

    # ---- what the pool does ---------------------------------------------------------------

    def _watch_pool(self) -> None:
        pool = self.pool
        evict, evict_blocks, reset, cache = (
            pool._maybe_evict_cached_block,
            pool.evict_blocks,
            pool.reset_prefix_cache,
            pool.cache_full_blocks,
        )

        def maybe_evict(block):
            keys = [] if block.block_hash is None else [block.block_hash]
            keys += list(getattr(pool, "cached_block_hashes_by_block", {}).get(block.block_id, ()))
            out = evict(block)
            by = self.allocator if self.cause == "evicted" else None
            for key in keys:
                if pool.cached_block_hash_to_block.get_one_block(key) is None:
                    self.removed[bytes(key)] = (self.cause, self.index, by)
            return out

        def failed_load(block_ids):
            self.cause = "failed_load"
            try:
                return evict_blocks(block_ids)
            finally:
                self.cause = "evicted"

        def reset_prefix_cache():
            keys = list(pool.cached_block_hash_to_block._cache)
            ok = reset()
            if ok:
                for key in keys:
                    self.removed[bytes(key)] = ("reset", self.index, None)
            return ok

        def cache_full_blocks(
            request, blocks, num_cached_blocks, num_full_blocks, block_size, kv_cache_group_id, *args, **kw
        ):
            cache(request, blocks, num_cached_blocks, num_full_blocks, block_size, kv_cache_group_id, *args, **kw)
            if kv_cache_group_id == self.miss_groups[0] and num_full_blocks > num_cached_blocks:
                # A block is cached under the hash block at its end (k of them in a coarser group).
                k = block_size // self.hash_block_size
                lo, hi = num_cached_blocks * k + k - 1, num_full_blocks * k
                for plain, real in zip(self._plain(request)[lo:hi:k], request.block_hashes[lo:hi:k]):
                    self.plain_cached.setdefault(plain, set()).add(real)

        pool._maybe_evict_cached_block = maybe_evict
        pool.evict_blocks = failed_load
        pool.reset_prefix_cache = reset_prefix_cache
        pool.cache_full_blocks = cache_full_blocks

    def _plain(self, req: Request) -> list:
        """The request's block hashes as vLLM's hasher makes them for the same token ids with no
        extra keys (the request's own when it has none)."""
        if not _has_extra_keys(req):
            return list(req.block_hashes)
        twin = Request(
            request_id=f"{req.request_id}-without-keys",
            prompt_token_ids=list(req.all_token_ids),
            sampling_params=SamplingParams(max_tokens=1),
            pooling_params=None,
            block_hasher=self.hasher,
        )
        return list(twin.block_hashes)[: len(req.block_hashes)]

    # ---- the ops: count them, and note whose allocation runs ------------------------------

    def _begin(self, op: dict) -> None:
        self.index += 1
        self.allocator = op.get("id")

    def op_arrive(self, op, step):
        self._begin(op)
        super().op_arrive(op, step)

    def op_sample(self, op, step):
        self._begin(op)
        super().op_sample(op, step)

    def op_decode(self, op, step):
        self._begin(op)
        super().op_decode(op, step)

    def op_generate(self, op, step):
        self._begin(op)
        super().op_generate(op, step)

    def op_finish(self, op, step):
        self._begin(op)
        super().op_finish(op, step)

    def op_preempt(self, op, step):
        self._begin(op)
        super().op_preempt(op, step)

    def op_reset(self, op, step):
        self._begin(op)
        super().op_reset(op, step)

    def op_admit(self, op, step):
        self._begin(op)
        req = self._request(op["id"])
        before = None
        if req.num_computed_tokens == 0 and req.status != RequestStatus.RUNNING:
            before = self._before_lookup(req)
        num_tokens = req.num_tokens
        super().op_admit(op, step)
        step["miss"] = None if before is None else self._miss(num_tokens, before, step)

    # ---- the record -----------------------------------------------------------------------

    def _before_lookup(self, req: Request) -> dict:
        """Each full block's state before the lookup: cached now, in flight, its last removal,
        cached under other keys, or never cached."""
        if not self.mgr.prefix_cache_lookup_enabled(req):
            return {"skipped": True}
        bs = self.hash_block_size
        cache = self.pool.cached_block_hash_to_block
        in_flight: set = set()
        for rid in self.running:
            other = self.live[rid]
            if rid != req.request_id:
                in_flight.update(other.block_hashes[other.num_computed_tokens // bs :])
        plain = self._plain(req)
        keyed = _has_extra_keys(req)
        first = self.miss_groups[0]

        def held(h) -> bool:
            return all(cache.get_one_block(make_block_hash_with_group_id(h, g)) is not None for g in self.miss_groups)

        states = []
        for i, h in enumerate(req.block_hashes):
            p = plain[i]
            if held(h):
                states.append(("cached",))
            elif h in in_flight:
                states.append(("not_yet_cached",))
            elif bytes(make_block_hash_with_group_id(h, first)) in self.removed:
                states.append(self.removed[bytes(make_block_hash_with_group_id(h, first))])
            elif self.plain_cached.get(p, {h}) - {h} or (
                # the same token ids cached (or once cached) under no keys at all
                keyed and (held(p) or bytes(make_block_hash_with_group_id(p, first)) in self.removed)
            ):
                states.append(("other_keys",))
            else:
                states.append(("never_cached",))
        return {"skipped": False, "states": states}

    def _miss(self, n: int, before: dict, step: dict, external: int = 0) -> dict:
        """The MISS record; ``external``: the tokens a KV connector offered past the hit."""
        bs = self.hash_block_size
        nb = n // bs
        cap = min((n - 1) // bs, nb)  # the lookup covers at most num_tokens - 1 tokens
        if before["skipped"]:
            start = external
            covered = min(start // bs, nb)
            reasons = [None] * covered + ["skipped"] * (nb - covered)
            tail = "skipped"
        else:
            states = before["states"]
            start = step["hit_tokens"] + external
            covered = min(start // bs, nb)
            own = step["group_hit_tokens"][self.miss_groups[0]] // bs if self.hybrid else covered
            run = next((i for i, s in enumerate(states[:cap]) if s[0] != "cached"), cap)
            dropped = run - 1 if self.eagle and run > 0 else None
            reasons = []
            for i in range(nb):
                if i < covered:
                    reasons.append(None)
                elif i >= cap:
                    reasons.append("last_token")
                elif i == dropped:
                    reasons.append("eagle_drop")
                elif i < own:
                    reasons.append("window")
                elif states[i][0] == "cached":
                    reasons.append("behind_miss")
                else:
                    reasons.append(states[i][0])
            tail = "partial_block"
        tokens: dict[str, int] = {}
        for r in reasons:
            if r is not None:
                tokens[r] = tokens.get(r, 0) + bs
        if covered < nb and start > covered * bs:  # the external tokens end inside this block
            r0 = reasons[covered]
            tokens[r0] -= start - covered * bs
        if n > max(nb * bs, start):
            tokens[tail] = tokens.get(tail, 0) + n - max(nb * bs, start)
        tokens = {r: t for r, t in tokens.items() if t}
        first_block = covered if covered < cap else None
        if first_block is not None:
            first = reasons[first_block]
        else:
            first = next((r for r in reasons if r is not None), tail if tail in tokens else None)
        evicted_by = None
        if first == "evicted" and first_block is not None:
            _, at, who = before["states"][first_block]
            evicted_by = {"step": at, "id": who}
        return {"tokens": tokens, "first_miss_block": first_block, "first_miss": first, "evicted_by": evicted_by}


def replay(scenario: dict) -> dict:
    return MissReplay(scenario).run(scenario["ops"])


def main() -> int:
    out = base._PROTOCOL_OUT
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            result = replay(json.loads(line))
        except base.ScenarioError as exc:
            result = {"error": str(exc)}
        except Exception as exc:  # one bad scenario must not end the process
            result = {"error": f"{type(exc).__name__}: {exc}"}
        out.write(json.dumps(result, separators=(",", ":")) + "\n")
        out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
