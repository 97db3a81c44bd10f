"""Conformance oracle for the offloading connector with hybrid KV cache groups (design
sections 8 and 10): vLLM's own Scheduler / AsyncScheduler with a hybrid KVCacheConfig and its
real ``OffloadingConnector``, built and played exactly as ``vllm_sched_driver.py`` and
``vllm_offloading.py`` do (imported from beside this file, unchanged, so their answers and
answer-cache keys stay theirs).

vLLM's connector reads the retention interval from ``CacheConfig`` (the KVCacheConfig the
engine derives from it carries the same value, kv_cache_utils.py:1692-1694, 0.31.0), while the
base driver sets it on its hand-built KVCacheConfig alone: here the cached VllmConfig's
``cache_config.prefix_cache_retention_interval`` is set to the scenario's as well, per
scenario, as the base driver sets ``num_gpu_blocks``.

One order more is fixed here: ``CPUOffloadingManager.complete_store`` receives a job's keys as
a Python set, and with several groups a job holds keys of different groups at the same token
position, so ``vllm_offloading.py``'s order by position alone leaves their ``BlockStored``
events in the set's (hash-randomized) order. This driver hands them over by position, then
group index, the order the explorer completes a store in. Nothing else depends on that order.

A KV connector with speculative decoding under the async scheduler replays as
``vllm_sched_async_connector_drafts_driver.py`` plays it, with the same order fixed.
Runs inside a vLLM virtualenv; never imports ``explorer``.
"""

from __future__ import annotations

import sys

import vllm_offloading
import vllm_sched_async_connector_drafts_driver as connector_drafts
import vllm_sched_driver as base  # beside this file; also redirects stdout for the protocol
from vllm.v1.kv_offload.base import get_offload_group_idx
from vllm_groups import kv_cache_groups

_instrument = vllm_offloading.instrument


def instrument(sched, cpu_blocks: int) -> None:
    """``vllm_offloading.instrument``, then each completed store in (position, group) order."""
    _instrument(sched, cpu_blocks)
    manager = sched.connector.connector_scheduler.manager
    complete_store = type(manager).complete_store.__get__(manager)

    def in_token_then_group_order(keys, req_context, success=True):
        def order(key):
            return (req_context.get_offload_key_position(key), get_offload_group_idx(key))

        return complete_store(sorted(keys, key=order), req_context, success)

    manager.complete_store = in_token_then_group_order


class OffloadingGroupsReplay(base.EngineReplay):
    def __init__(self, scenario: dict):
        eng = scenario["engine"]
        kv = eng.get("kv_connector") or {}
        if kv.get("kind") != "offloading" or not eng.get("kv_cache_groups"):
            raise base.ScenarioError("this driver replays the offloading connector with kv_cache_groups only")
        super().__init__(scenario)


class _WithRetention:
    """The base driver's config cache, its VllmConfig carrying the scenario's retention."""

    def __init__(self, configs, retention: int | None):
        self.configs, self.retention = configs, retention

    def vllm(self, eng: dict):
        vc = self.configs.vllm(eng)
        vc.cache_config.prefix_cache_retention_interval = self.retention
        return vc


def with_retention(scenario: dict, build):
    """``build()`` (a replay's construction) with the scenario's retention in its VllmConfig."""
    retention = kv_cache_groups(scenario["engine"])[3]
    configs = base._configs
    base._configs = lambda: _WithRetention(configs(), retention)
    try:
        return build()
    finally:
        base._configs = configs


def replay_class(scenario: dict):
    eng = scenario["engine"]
    if eng.get("scheduler") == "async" and eng.get("speculative"):
        return with_retention(scenario, lambda: connector_drafts.AsyncConnectorDraftsReplay(scenario))
    return with_retention(scenario, lambda: OffloadingGroupsReplay(scenario))


def main() -> int:
    vllm_offloading.instrument = instrument
    base.EngineReplay = replay_class  # type: ignore[misc, assignment]
    return base.main()


if __name__ == "__main__":
    sys.exit(main())
