"""Suite-wide: the order test files are handed to the parallel workers, and one scan of the
installed Streamlit components per test process (`pytest_configure`).

With ``--dist loadfile`` each file is one unit of work, handed to whichever worker is free. The
longest files go first (a short list of them, then the browser tier and the conformance tier), so the run does not end with
one worker on a long browser file while the other has nothing left (scripts/run_tests.sh passes
``--no-loadscope-reorder``, which keeps this order instead of xdist's most-tests-first). Tests
inside a file keep their order.
"""

from __future__ import annotations

import functools

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


def pytest_configure(config: pytest.Config) -> None:
    """Streamlit's AppTest scans every installed distribution for component manifests on each
    new AppTest's first run (``scan_component_manifests``: about 0.07 s over this venv's ~460
    distributions, for each of the suite's hundreds of AppTests). What is installed does not
    change during a test run, so each test process scans once; every AppTest still registers
    what the scan found, as Streamlit does."""
    from streamlit.components.v2 import manifest_scanner

    scan = functools.cache(manifest_scanner.scan_component_manifests)
    manifest_scanner.scan_component_manifests = lambda max_workers=None: list(scan(max_workers))
