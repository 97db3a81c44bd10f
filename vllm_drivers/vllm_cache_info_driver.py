"""Conformance oracle for ``vllm:cache_config_info``: the info gauge vLLM's PrometheusStatLogger
registers for the engine's CacheConfig (loggers.py: log_metrics_info; cache.py: metrics_info).

Runs inside a vLLM virtualenv. Per normalized engine-step scenario (one JSON line on stdin), it
builds ``vllm_metrics_driver.py``'s replay, which builds vLLM's VllmConfig, Scheduler and
PrometheusStatLogger for the scenario's engine exactly as the metrics tier does, and answers
every sample of that one family as the registry exposes it once the engine is initialized, read
with prometheus_client's own parser: ``{"type", "help", "samples": [{"labels": {...}, "value":
v}]}``, or ``{"error": ...}``. No op is replayed: the gauge is set once, at initialization. The metrics driver is
imported unchanged, so its own answers keep their cache keys.
"""

from __future__ import annotations

import json
import sys

import vllm_metrics_driver as metrics  # beside this file; redirects stdout for the protocol
from prometheus_client import REGISTRY, generate_latest
from prometheus_client.parser import text_string_to_metric_families

FAMILY = "vllm:cache_config_info"


def cache_info(scenario: dict) -> dict:
    replay = metrics.MetricsReplay(scenario)  # vLLM's config, Scheduler and logger, as the metrics tier builds them
    # AsyncLLM tells its loggers once the engine core is up (StatLoggerManager): only then is
    # the info gauge registered, with the pool size the engine found.
    replay.prom.log_engine_initialized()
    text = generate_latest(REGISTRY).decode("utf-8")
    for family in text_string_to_metric_families(text):
        if family.name == FAMILY:
            samples = [{"labels": dict(s.labels), "value": s.value} for s in family.samples]
            return {"type": family.type, "help": family.documentation, "samples": samples}
    return {"error": f"{FAMILY} is not registered"}


def main() -> int:
    base = metrics.base
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            result = cache_info(json.loads(line))
        except base.ScenarioError as exc:
            result = {"error": str(exc)}
        except Exception as exc:  # one bad scenario must not end the process
            result = {"error": f"{type(exc).__name__}: {exc}"}
        base._PROTOCOL_OUT.write(json.dumps(result, separators=(",", ":")) + "\n")
        base._PROTOCOL_OUT.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
