"""Suite-wide: the order test files are handed to the parallel workers.

With ``--dist loadfile`` each file is one unit of work, handed to whichever worker is free. The
longest files go first (a short list of them, then the browser tier and the conformance tier), so the run does not end with
one worker on a long browser file while the other has nothing left (scripts/run_tests.sh passes
``--no-loadscope-reorder``, which keeps this order instead of xdist's most-tests-first). Tests
inside a file keep their order.
"""

from __future__ import annotations

import pytest

# Handed out first, longest first: the files that took longest in recent full runs (a file is one
# unit of work; a long one handed out late leaves the other worker idle at the end), then the
# tiers whose files run longest (browsers and servers, then vLLM).
FIRST = (
    "tests/e2e/test_memory_e2e.py",
    "tests/e2e/test_presenter_lessons_e2e.py",
    "tests/e2e/test_concurrent_e2e.py",
    "tests/e2e/test_heavy_turns_e2e.py",
    "tests/e2e/test_replay_worker_e2e.py",
    "tests/conformance/test_offloading_conformance.py",
    "tests/conformance/test_sched_miss_conformance.py",
    "tests/conformance/test_metrics_conformance.py",
    "tests/e2e/",
    "tests/conformance/",
)


def _rank(item: pytest.Item) -> int:
    path = item.nodeid
    return next((i for i, prefix in enumerate(FIRST) if path.startswith(prefix)), len(FIRST))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=_rank)  # stable: files and the tests in them keep their relative order
