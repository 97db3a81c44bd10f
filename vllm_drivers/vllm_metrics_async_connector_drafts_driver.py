"""Conformance oracle for the metrics of a KV connector with speculative decoding under the
async scheduler: ``vllm_metrics_driver.py`` (vLLM's loggers wired as AsyncLLM wires them) around
the played model runner and connector worker of ``vllm_sched_async_connector_drafts_driver.py``.

Runs inside a vLLM virtualenv and speaks the metrics driver's protocol; both modules are
imported unchanged from beside this file, so their own answers keep their cache keys. Only
engine-step scenarios with ``scheduler = "async"``, ``speculative`` and ``kv_connector`` set are
answered.
"""

from __future__ import annotations

import sys

import vllm_metrics_driver as metrics  # beside this file; redirects stdout for the protocol
from vllm_sched_async_connector_drafts_driver import AsyncConnectorDraftsReplay


class AsyncConnectorDraftsMetricsReplay(metrics.MetricsReplay, AsyncConnectorDraftsReplay):
    """The metrics driver's replay with the async connector-drafts played runner (its _execute)."""


def main() -> int:
    # vllm_metrics_driver.main() builds its MetricsReplay by name: this driver's are ours.
    metrics.MetricsReplay = AsyncConnectorDraftsMetricsReplay  # type: ignore[misc]
    return metrics.main()


if __name__ == "__main__":
    sys.exit(main())
