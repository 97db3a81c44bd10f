"""Conformance oracle for the metrics of the offloading connector with hybrid KV cache groups:
``vllm_metrics_driver.py`` (vLLM's loggers wired as AsyncLLM wires them) around the replay of
``vllm_sched_offloading_groups_driver.py`` (the scenario's retention interval in vLLM's
``CacheConfig``, where the connector reads it, and each store's events in token, then group
order). With speculative decoding under the async scheduler, the async connector-drafts
metrics replay.

Runs inside a vLLM virtualenv and speaks the metrics driver's protocol; every module is
imported unchanged from beside this file, so their own answers keep their cache keys.
"""

from __future__ import annotations

import sys

import vllm_metrics_async_connector_drafts_driver as connector_drafts_metrics
import vllm_metrics_driver as metrics  # beside this file; redirects stdout for the protocol
import vllm_sched_offloading_groups_driver as groups

_MetricsReplay = metrics.MetricsReplay


def metrics_replay(scenario: dict):
    eng = scenario["engine"]
    kv = eng.get("kv_connector") or {}
    if kv.get("kind") != "offloading" or not eng.get("kv_cache_groups"):
        raise groups.base.ScenarioError("this driver replays the offloading connector with kv_cache_groups only")
    if eng.get("scheduler") == "async" and eng.get("speculative"):
        cls = connector_drafts_metrics.AsyncConnectorDraftsMetricsReplay
        return groups.with_retention(scenario, lambda: cls(scenario))
    return groups.with_retention(scenario, lambda: _MetricsReplay(scenario))


def main() -> int:
    groups.vllm_offloading.instrument = groups.instrument
    # vllm_metrics_driver.main() builds its MetricsReplay by name: this driver's are ours.
    metrics.MetricsReplay = metrics_replay  # type: ignore[misc, assignment]
    return metrics.main()


if __name__ == "__main__":
    sys.exit(main())
