"""Conformance oracle for speculative decoding under the async scheduler: vLLM's own
AsyncScheduler with a SpeculativeConfig, its model runner played as vLLM's worker plays it.

Runs inside a vLLM virtualenv, speaks the protocol of ``vllm_sched_driver.py`` (imported from
beside this file; everything but the played model runner is that driver's), and answers only
engine-step scenarios with ``scheduler = "async"`` and ``speculative`` set, without a KV
connector: every other scenario goes to ``vllm_sched_driver.py`` itself, whose answers (and
answer-cache keys) this driver leaves untouched.

Under async scheduling EngineCore never hands drafts to the scheduler (core.py:661-668, 0.31.0;
the deferred path of :765-775 is for structured output only): the AsyncScheduler gives every
scheduled request that samples ``-1`` drafts (async_scheduler.py:25-57), and the worker puts the
drafter's proposals in their place on the device. What the played runner takes from the worker
(gpu_model_runner.py, 0.31.0; the same in 0.33.0):

- a request's drafts are real only when the previous batch ran the request: the worker copies
  the previous step's draft tokens by ``prev_req_id_to_index`` (:1795-1906), which holds the
  previous batch's requests less those finished, preempted or unscheduled since (:1233-1252);
  otherwise the ``-1`` inputs stay, and no draft is accepted;
- the scheduler placed the batch as if the previous batch accepted every draft; the worker
  corrects the position by what that batch rejected (``prev_num_draft_len``, :1359-1398,
  :1533-1560), so the played runner samples ``output`` from the corrected position;
- a batch planned past the request's last token (the batch before finishes it) samples 0s,
  which the scheduler drops with the finished request.
"""

from __future__ import annotations

import sys

import vllm_sched_driver as base  # beside this file; also redirects stdout for the protocol
from vllm.v1.outputs import EMPTY_MODEL_RUNNER_OUTPUT, ModelRunnerOutput


class AsyncDraftsReplay(base.EngineReplay):
    def __init__(self, scenario: dict):
        eng = scenario["engine"]
        if eng.get("scheduler") != "async" or not eng.get("speculative") or eng.get("kv_connector"):
            raise base.ScenarioError(
                "this driver replays speculative decoding under the async scheduler, without a KV connector, only"
            )
        super().__init__(scenario)
        self.prev_rejected: dict[str, int] = {}  # the previous batch's rejected drafts, per request

    def _execute(self, so) -> ModelRunnerOutput:
        # The previous batch's requests still running: a finish, a preemption (a reset's too)
        # or a re-admission takes a request out of the worker's persistent batch.
        running = set(so.scheduled_cached_reqs.req_ids) - set(so.scheduled_cached_reqs.resumed_req_ids)
        prev = {rid: n for rid, n in self.prev_rejected.items() if rid in running}
        self.prev_rejected = {}
        if so.total_num_scheduled_tokens == 0:
            return EMPTY_MODEL_RUNNER_OUTPUT
        req_ids = list(so.num_scheduled_tokens)
        sampled: list[list[int]] = []
        for rid in req_ids:
            req = self.sched.requests[rid]
            self.prev_rejected[rid] = 0
            if req.is_prefill_chunk:
                sampled.append([])
                continue
            drafts = list(so.scheduled_spec_decode_tokens.get(rid, ()))
            index = req.num_computed_tokens - len(drafts) - req.num_prompt_tokens - prev.get(rid, 0)
            if index < 0:
                raise base.ScenarioError(f"the played model was asked for output[{index}] of {rid!r}")
            real = bool(drafts) and rid in prev
            num_accepted = self._num_accepted_real(rid, len(drafts)) if real else 0
            self.prev_rejected[rid] = len(drafts) - num_accepted
            num_sampled = 1 + num_accepted
            tokens = self.outputs[rid][index : index + num_sampled]
            sampled.append(tokens + [0] * (num_sampled - len(tokens)))
        return ModelRunnerOutput(
            req_ids=req_ids,
            req_id_to_index={rid: i for i, rid in enumerate(req_ids)},
            sampled_token_ids=sampled,
        )

    def _num_accepted_real(self, rid: str, num_drafts: int) -> int:
        """The request's next ``accepted`` entry (0 past the end), capped at the drafts."""
        i = self.num_verified.get(rid, 0)
        self.num_verified[rid] = i + 1
        accepted = self.accepted.get(rid, [])
        return min(accepted[i] if i < len(accepted) else 0, num_drafts)


def main() -> int:
    # vllm_sched_driver.replay() builds its EngineReplay by name: this driver's replays are ours.
    base.EngineReplay = AsyncDraftsReplay  # type: ignore[misc]
    return base.main()


if __name__ == "__main__":
    sys.exit(main())
