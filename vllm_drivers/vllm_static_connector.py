"""The `static` connector of design section 10, as a vLLM 0.31.0 KV connector (scheduler side).

Loaded by vLLM's KVConnectorFactory from ``vllm_sched_driver.py`` (``kv_connector_module_path``
names this module), inside vLLM's virtualenv: it must not import ``explorer``. It is the test
connector the conformance tier compares ``explorer/core/sched/kv_connector/static.py`` with,
written from the design's words, not from that file:
- ``held[request_id] = (tokens, async, load_steps, invalid block indices)``: the store holds the
  first ``tokens`` tokens of the request; it offers those past the block-aligned local hit;
- every allocation with external tokens becomes a load job in the step's metadata, with the
  invalid indices turned into the block ids of the request's group-0 table;
- ``allocs`` records every ``update_state_after_alloc`` (the replay's ``external`` entry);
- ``reset_cache`` empties the store. The worker side is played by the driver (``StaticWorker``).
"""

from __future__ import annotations

from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    SupportsHMA,
)


class StaticMetadata(KVConnectorMetadata):
    def __init__(self, loads: list) -> None:
        # (request id, async?, batch outputs to wait, invalid block ids)
        self.loads = loads


class ExplorerStaticConnector(KVConnectorBase_V1, SupportsHMA):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.held: dict[str, tuple[int, bool, int, tuple[int, ...]]] = {}
        self.allocs: list[tuple[str, int]] = []
        self.pending_loads: list = []
        self.resets = 0

    # ---- scheduler side ----------------------------------------------------------------------

    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        tokens, load_async, _, _ = self.held.get(request.request_id, (0, False, 1, ()))
        ext = max(0, min(tokens, request.num_tokens) - num_computed_tokens)
        return ext, load_async and ext > 0

    def update_state_after_alloc(self, request, blocks, num_external_tokens):
        self.allocs.append((request.request_id, int(num_external_tokens)))
        if num_external_tokens <= 0:
            return
        _, load_async, steps, invalid = self.held[request.request_id]
        table = blocks.get_block_ids()[0]
        ids = tuple(table[i] for i in invalid if i < len(table))
        self.pending_loads.append((request.request_id, load_async, steps if load_async else 1, ids))

    def build_connector_meta(self, scheduler_output):
        meta = StaticMetadata(self.pending_loads)
        self.pending_loads = []
        return meta

    def request_finished(self, request, block_ids):
        return False, None

    def request_finished_all_groups(self, request, block_ids):
        return False, None

    def reset_cache(self):
        self.resets += 1
        self.held = {rid: (0, a, s, inv) for rid, (_, a, s, inv) in self.held.items()}
        return True

    # ---- worker side: played by the driver, never called ---------------------------------------

    def start_load_kv(self, forward_context, **kwargs):
        pass

    def wait_for_layer_load(self, layer_name):
        pass

    def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kwargs):
        pass

    def wait_for_save(self):
        pass


class StaticWorker:
    """The played worker: a sync load reports its invalid blocks with its batch; an async one
    finishes (with its invalid blocks) in the load_steps-th batch output from its own."""

    def __init__(self) -> None:
        self.pending: dict[str, list] = {}

    def execute(self, meta) -> tuple[set[str], set[int]]:
        finished: set[str] = set()
        invalid: set[int] = set()
        for rid, load_async, steps, ids in getattr(meta, "loads", []):
            if load_async:
                self.pending[rid] = [steps, ids]
            else:
                invalid.update(ids)
        for rid in list(self.pending):
            entry = self.pending[rid]
            if entry[0] > 1:
                entry[0] -= 1
                continue
            del self.pending[rid]
            finished.add(rid)
            invalid.update(entry[1])
        return finished, invalid
