"""Conformance oracle for a KV connector with speculative decoding under the async scheduler:
vLLM's own AsyncScheduler with a SpeculativeConfig and a KV connector (the ``static`` test
connector or vLLM's OffloadingConnector), the model runner and the connector's worker side
played as ``vllm_sched_async_drafts_driver.py`` and ``vllm_sched_driver.py`` play them.

Runs inside a vLLM virtualenv and answers only engine-step scenarios with
``scheduler = "async"``, ``speculative`` and ``kv_connector`` set. Everything is imported from
the two drivers beside this file, unchanged (their answers and answer-cache keys stay theirs):
the played worker's drafts and positions are the async-drafts driver's, the connector's worker
output (finished loads, invalid blocks, the offloading jobs) is the base driver's, attached to
the same ModelRunnerOutput as the runner does (an empty batch carries the connector output
alone, kv_connector_model_runner_mixin.py:25-37, 0.31.0).
"""

from __future__ import annotations

import sys

import vllm_sched_async_drafts_driver as drafts
import vllm_sched_driver as base  # beside this file; also redirects stdout for the protocol
from vllm.v1.outputs import EMPTY_MODEL_RUNNER_OUTPUT, KVConnectorOutput, ModelRunnerOutput


class AsyncConnectorDraftsReplay(drafts.AsyncDraftsReplay):
    def __init__(self, scenario: dict):
        eng = scenario["engine"]
        if eng.get("scheduler") != "async" or not eng.get("speculative") or not eng.get("kv_connector"):
            raise base.ScenarioError(
                "this driver replays a KV connector with speculative decoding under the async scheduler only"
            )
        # The base driver's __init__, past the async-drafts driver's (which refuses a connector).
        super(drafts.AsyncDraftsReplay, self).__init__(scenario)
        self.prev_rejected = {}

    def _execute(self, so) -> ModelRunnerOutput:
        # The connector's worker output as the base driver's _execute builds it: repeated, not
        # moved into a helper there, because editing that driver would re-key all its answers.
        kvo = None
        if self.offloading:
            kvo = self.worker.execute(so.kv_connector_metadata)
        elif self.worker is not None:
            finished, invalid = self.worker.execute(so.kv_connector_metadata)
            kvo = KVConnectorOutput(finished_recving=finished, invalid_block_ids=invalid)
        mro = super()._execute(so)
        if kvo is None:
            return mro
        if mro is EMPTY_MODEL_RUNNER_OUTPUT:
            return ModelRunnerOutput.with_kv_conn_output_only(kvo)
        mro.kv_connector_output = kvo
        return mro


def main() -> int:
    base.EngineReplay = AsyncConnectorDraftsReplay  # type: ignore[misc]
    return base.main()


if __name__ == "__main__":
    sys.exit(main())
