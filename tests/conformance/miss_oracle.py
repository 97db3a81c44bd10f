"""vLLM's own state as the oracle of the miss reasons (design section 14).

``VllmMissOracle`` is ``VllmOracle`` (oracle.py) running ``vllm_miss_driver.py``: the
manager-level replay of vllm_driver.py, whose every admit also carries the MISS record read
from vLLM's objects. ``oracle.compare`` then diffs the whole answer, the records included.

This module runs in the project's virtualenv; it never imports vLLM.
"""

from __future__ import annotations

from tests.conformance.oracle import DRIVERS, VllmOracle

MISS_DRIVER = DRIVERS / "vllm_miss_driver.py"


class VllmMissOracle(VllmOracle):
    """One vllm_miss_driver.py process; ``replay`` sends a manager-level scenario."""

    driver = MISS_DRIVER


class VllmSchedMissOracle(VllmOracle):
    """One vllm_sched_miss_driver.py process; ``replay`` sends an engine-step scenario."""

    driver = DRIVERS / "vllm_sched_miss_driver.py"
