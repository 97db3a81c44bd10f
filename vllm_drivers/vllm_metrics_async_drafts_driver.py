"""Conformance oracle for the metrics of speculative decoding under the async scheduler:
``vllm_metrics_driver.py`` (vLLM's loggers wired as AsyncLLM wires them) around the played
model runner of ``vllm_sched_async_drafts_driver.py`` (the drafts kept by vLLM's worker).

Runs inside a vLLM virtualenv and speaks the metrics driver's protocol; both modules are
imported unchanged from beside this file, so their own answers keep their cache keys. Only
engine-step scenarios with ``scheduler = "async"`` and ``speculative`` set, without a KV
connector, are answered.
"""

from __future__ import annotations

import sys

import vllm_metrics_driver as metrics  # beside this file; redirects stdout for the protocol
from vllm_sched_async_drafts_driver import AsyncDraftsReplay


class AsyncDraftsMetricsReplay(metrics.MetricsReplay, AsyncDraftsReplay):
    """The metrics driver's replay with the async-drafts played model runner (its _execute)."""


def main() -> int:
    # vllm_metrics_driver.main() builds its MetricsReplay by name: this driver's are ours.
    metrics.MetricsReplay = AsyncDraftsMetricsReplay  # type: ignore[misc]
    return metrics.main()


if __name__ == "__main__":
    sys.exit(main())
