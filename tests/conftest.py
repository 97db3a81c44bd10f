"""Suite-wide: the order test files are handed to the parallel workers, one scan of the
installed Streamlit components per test process (`pytest_configure`), and one loopback Ray head
that the app's sweeps join for the whole run.

With ``--dist loadfile`` each file is one unit of work, handed to whichever worker is free. The
longest files go first (a short list of them, then the browser tier and the conformance tier), so the run does not end with
one worker on a long browser file while the other has nothing left (scripts/run_tests.sh passes
``--no-loadscope-reorder``, which keeps this order instead of xdist's most-tests-first). Tests
inside a file keep their order.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

from explorer.traffic.worker import RAY_ADDRESS_ENV, ray_address
from tests.ray_head import start_head, stop_tagged

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
    if _wants_shared_ray(config):
        _start_shared_ray(config)


# The app's sweeps under test (the Trace replay page's worker, in the page tests and the browser
# tests) join one Ray head on loopback for the whole run, as a server started with
# EXPLORER_RAY_ADDRESS does, instead of starting and stopping a local Ray instance per sweep. A
# 2-cell sweep of the shipped trace on this suite's machine: 7.7-8.2 core-seconds and 6.2 s on
# its own local instance, 3.0-3.4 core-seconds and 2.0 s joining a running head. The process that
# hands out the tests (pytest-xdist's controller, or the only process) starts the head before the
# workers start, so they inherit its address, and stops its processes (and only those) at the
# end. `tests/ui/test_page_replay.py` runs one sweep without it, on a local instance.
_SHARED_RAY = pytest.StashKey[tuple[str, Path]]()
_SWEEPING = ("tests/ui", "tests/e2e")  # the tiers whose tests start the page's sweeps


def _wants_shared_ray(config: pytest.Config) -> bool:
    if hasattr(config, "workerinput") or ray_address():  # a worker, or a cluster given
        return False
    root = Path(config.rootpath)
    sweeping = [root / t for t in _SWEEPING]
    for arg in config.args:
        path = (Path(config.invocation_params.dir) / arg.split("::")[0]).resolve()
        if any(path == s or path in s.parents or s in path.parents for s in sweeping):
            return True
    return False


def _start_shared_ray(config: pytest.Config) -> None:
    scratch = Path(tempfile.mkdtemp(prefix="pxray", dir="/tmp"))  # short: Ray's socket paths must fit
    tag = uuid.uuid4().hex
    try:
        address = start_head(scratch, tag)
    except (subprocess.SubprocessError, OSError) as e:  # the sweeps then start their own local instances
        stop_tagged(tag)
        shutil.rmtree(scratch, ignore_errors=True)
        print(f"no shared Ray head for this run ({e!r}); each sweep starts its own", file=sys.stderr)
        return
    os.environ[RAY_ADDRESS_ENV] = address
    config.stash[_SHARED_RAY] = (tag, scratch)


def pytest_unconfigure(config: pytest.Config) -> None:
    shared = config.stash.get(_SHARED_RAY, None)
    if shared is not None:
        tag, scratch = shared
        os.environ.pop(RAY_ADDRESS_ENV, None)
        stop_tagged(tag)
        shutil.rmtree(scratch, ignore_errors=True)
