"""Conformance oracle for the engine-step miss reasons (design section 14), from vLLM's Scheduler.

Runs inside a vLLM virtualenv, like ``vllm_sched_driver.py``, whose engine replay it extends
(it never imports ``explorer``). Protocol: vllm_sched_driver.py's; every ``step`` entry of the
answer also carries ``"misses"``: {request id: MISS} for each lookup the Scheduler ran in it.

The records are read off vLLM's objects exactly as vllm_miss_driver.py reads them (its reader
is reused on the Scheduler's KVCacheManager): ``get_computed_blocks`` is wrapped on the
manager instance to read each block's state before the lookup and the hit after it,
``allocate_slots`` to know whose allocation pops. "Running" is the Scheduler's ``running``
queue (a request waiting for a connector's async load is not in it), and a running request has
computed the blocks the full-attention group has cached for it (``num_cached_block``). With a KV connector, ``get_num_new_matched_tokens`` is wrapped on the
connector instance too: its offer is the record's external tokens.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import vllm_sched_driver as base  # noqa: E402

# Taken before vllm_driver.py (under vllm_miss_driver) is imported: each keeps a duplicate of
# stdout as its protocol stream, and only the first import still finds the real one there.
PROTOCOL_OUT = base._PROTOCOL_OUT

import vllm_miss_driver as manager_level  # noqa: E402


class SchedMissReplay(base.EngineReplay):
    def __init__(self, scenario: dict):
        super().__init__(scenario)
        self.index = -1
        mgr = self.sched.kv_cache_manager
        reader = object.__new__(manager_level.MissReplay)
        reader.mgr, reader.pool = mgr, mgr.block_pool
        reader.hash_block_size, reader.hybrid = self.hash_block_size, self.hybrid
        reader.caching, reader.hasher = mgr.enable_caching, self.hasher
        reader.index, reader.allocator, reader.cause = -1, None, "evicted"
        reader.removed, reader.plain_cached = {}, {}
        coordinator = mgr.coordinator
        groups = getattr(coordinator, "attention_groups", None)
        reader.miss_groups = list(groups[0][1]) if groups else [0]
        drop = getattr(coordinator, "drop_eagle_group_ids", None)
        reader.eagle = reader.miss_groups[0] in (coordinator.eagle_group_ids if drop is None else drop)
        self.reader = reader
        if reader.caching:
            reader._watch_pool()
        n = len(mgr.kv_cache_config.kv_cache_groups)
        full = mgr.coordinator.single_type_managers[reader.miss_groups[0]]
        k = full.block_size // self.hash_block_size
        get_computed_blocks, allocate_slots = mgr.get_computed_blocks, mgr.allocate_slots

        def looked_up(request, *cap):
            # Each running request has computed what its full-attention group has cached.
            running = {}
            for r in self.sched.running:
                running[r.request_id] = r
            reader.running = [rid for rid in running if rid != request.request_id]
            reader.live = {
                rid: _Computed(r, full.num_cached_block.get(rid, 0) * k * self.hash_block_size)
                for rid, r in running.items()
            }
            before = reader._before_lookup(request)
            num_tokens = request.num_tokens
            blocks, hit, spb = get_computed_blocks(request, *cap)
            step = {"hit_tokens": hit}
            if self.hybrid:
                hits = [0] * n
                if mgr.prefix_cache_lookup_enabled(request):
                    coordinator = mgr.coordinator
                    if hasattr(coordinator, "find_longest_cache_hit_per_group"):
                        per = coordinator.find_longest_cache_hit_per_group(request.block_hashes, num_tokens - 1)
                        hits = list(per[1])
                    else:  # one group: its own hit is the hit
                        hits = [hit]
                step["group_hit_tokens"] = hits
            self.pending[request.request_id] = (num_tokens, before, step, 0)
            return blocks, hit, spb

        def allocated(request, *args, **kwargs):
            reader.allocator = request.request_id
            return allocate_slots(request, *args, **kwargs)

        mgr.get_computed_blocks, mgr.allocate_slots = looked_up, allocated
        # A KV connector's offer after the local hit: the external tokens of the record.
        self.pending: dict[str, tuple] = {}
        connector = self.sched.connector
        if connector is not None:
            matched = connector.get_num_new_matched_tokens

            def offered(request, num_local):
                ext, load_async = matched(request, num_local)
                seen = self.pending.get(request.request_id)
                if seen is not None and not request.skip_reading_prefix_cache:  # else vLLM drops it
                    self.pending[request.request_id] = (*seen[:3], ext or 0)
                return ext, load_async

            connector.get_num_new_matched_tokens = offered

    def _begin(self) -> None:
        self.index += 1
        self.reader.index = self.index

    def op_arrive(self, op, entry):
        self._begin()
        super().op_arrive(op, entry)

    def op_abort(self, op, entry):
        self._begin()
        super().op_abort(op, entry)

    def op_reset(self, op, entry):
        self._begin()
        super().op_reset(op, entry)

    def op_step(self, op, entry):
        self._begin()
        self.pending = {}
        super().op_step(op, entry)
        entry["misses"] = {rid: self.reader._miss(*p) for rid, p in self.pending.items()}


class _Computed:
    """A running request as the reader asks it: its block hashes and how far it is computed."""

    def __init__(self, request, num_computed_tokens: int) -> None:
        self.block_hashes = request.block_hashes
        self.num_computed_tokens = num_computed_tokens


def main() -> int:
    out = PROTOCOL_OUT
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            message = json.loads(line)
            result = SchedMissReplay(message).answer(message["ops"], bool(message.get("num_cached_tokens")))
        except base.ScenarioError as exc:
            result = {"error": str(exc)}
        except Exception as exc:  # one bad scenario must not end the process
            result = {"error": f"{type(exc).__name__}: {exc}"}
        out.write(json.dumps(result, separators=(",", ":")) + "\n")
        out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
