"""The replay page's worker job planned into a grid (`explorer.traffic.worker.plan_job`): lists
of block sizes and schedulers, as `explorer sweep` plans them, and the one-value job of before."""

from __future__ import annotations

import pytest

from explorer.errors import BadInput
from explorer.traffic.ray_sweep import Cell, plan_cells
from explorer.traffic.worker import plan_job

JOB = {"sizes": [10, 40], "policies": ["vllm", "unbounded", "scheduler"]}


def test_lists_plan_every_cell_as_the_sweep_command_does():
    bss, scheds, cells = plan_job({**JOB, "block_sizes": [16, 32], "schedulers": ["async", "sync"]})
    assert (bss, scheds) == ([16, 32], ["async", "sync"])
    assert cells == plan_cells([16, 32], [10, 40], JOB["policies"], ["async", "sync"])
    assert len(cells) == 2 * (2 + 1 + 2 * 2)
    assert Cell(32, "scheduler", 40, "sync") in cells and Cell(16, "unbounded", None) in cells


def test_a_job_of_one_block_size_and_scheduler_still_runs():
    bss, scheds, cells = plan_job({**JOB, "block_size": 64, "scheduler": "sync"})
    assert (bss, scheds) == ([64], ["sync"])
    assert cells == plan_cells([64], [10, 40], JOB["policies"], ["sync"])
    assert plan_job(JOB)[:2] == ([16], ["async"])  # neither given: the page's defaults


@pytest.mark.parametrize(
    "extra,needle",
    [
        ({"block_sizes": []}, "non-empty list"),
        ({"block_sizes": [16, 0]}, "positive integer"),
        ({"schedulers": ["fast"]}, "scheduler must be one of"),
        ({"block_sizes": [16, 16]}, "listed twice"),
        ({"block_sizes": ["16"]}, "integers"),
        ({"block_sizes": [1, 2, 3], "max_cells": 14}, "15 cells; this page runs at most 14"),
    ],
)
def test_a_bad_job_is_one_clear_error(extra, needle):
    with pytest.raises(BadInput, match=needle):
        plan_job({**JOB, **extra})
