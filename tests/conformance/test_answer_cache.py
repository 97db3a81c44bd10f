"""vLLM's answers kept on disk (answer_cache.py): what the key is made of, and that the oracle
reads a kept answer without asking vLLM, stores what it asked, and fails when a checked one
differs from a live run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conformance import answer_cache
from tests.conformance.oracle import DRIVER, RELEASES, VENV_PYTHON, VllmOracle, VllmOracleError
from tests.conformance.sched_oracle import SCHED_DRIVER
from tests.conformance.test_oracle_smoke import A, arrive, engine

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.conformance

SCENARIO = {"engine": engine(), "ops": [arrive("A", A)]}
LINE = answer_cache.scenario_line(SCENARIO)


def test_the_driver_source_follows_its_imports_beside_it():
    names = [name for name, _ in answer_cache.driver_sources(DRIVER)]
    assert names == sorted(names) and "vllm_driver.py" in names and "vllm_groups.py" in names
    sched = [name for name, _ in answer_cache.driver_sources(SCHED_DRIVER)]
    assert {"vllm_sched_driver.py", "vllm_groups.py", "vllm_offloading.py", "vllm_static_connector.py"} <= set(sched)
    metrics = [name for name, _ in answer_cache.driver_sources(DRIVER.parent / "vllm_metrics_driver.py")]
    assert {"vllm_sched_driver.py", "exposition_samples.py"} <= set(metrics)


def test_the_release_is_read_from_the_oracle_venv():
    assert answer_cache.vllm_release(VENV_PYTHON) == "0.31.0"
    assert answer_cache.vllm_release(Path("/nonexistent/bin/python")) is None


def test_a_change_of_any_part_gives_another_key(tmp_path):
    folder = tmp_path / "drivers"
    shutil.copytree(DRIVER.parent, folder, ignore=shutil.ignore_patterns("__pycache__"))
    copy = folder / DRIVER.name
    key = answer_cache.answer_key(copy, "0.31.0", LINE)
    assert key == answer_cache.answer_key(DRIVER, "0.31.0", LINE)  # the sources, not their place
    assert answer_cache.answer_key(copy, "0.33.0", LINE) != key
    assert answer_cache.answer_key(copy, "0.31.0", LINE.replace('"A"', '"B"')) != key
    answer_cache.driver_sources.cache_clear()
    groups = folder / "vllm_groups.py"
    groups.write_text(groups.read_text(encoding="utf-8") + "\n# an edit of an imported module\n", encoding="utf-8")
    try:
        assert answer_cache.answer_key(copy, "0.31.0", LINE) != key
    finally:
        answer_cache.driver_sources.cache_clear()


@pytest.fixture
def answers(tmp_path, monkeypatch):
    monkeypatch.setenv(answer_cache.DIR_ENV, str(tmp_path / "answers"))
    monkeypatch.delenv(answer_cache.MODE_ENV, raising=False)
    monkeypatch.delenv(answer_cache.CHECK_ENV, raising=False)
    return tmp_path / "answers"


@pytest.fixture
def driver(vllm_oracles):
    """The session's running 0.31.0 driver: asking it costs no new vLLM import (seconds)."""
    return vllm_oracles.get(VllmOracle, RELEASES[0])


def test_an_asked_answer_is_kept_and_then_read_without_vllm(answers, driver, monkeypatch):
    asked = driver.replay(SCENARIO)
    assert len(list(answers.rglob("*.json.gz"))) == 1
    with VllmOracle() as oracle:
        assert oracle.replay(SCENARIO) == asked
        assert oracle._proc is None  # no driver process was started
    monkeypatch.setenv(answer_cache.MODE_ENV, "live")
    asks = driver._replays
    assert driver.replay(SCENARIO) == asked
    assert driver._replays == asks + 1  # asked of vLLM again


def test_a_checked_answer_that_differs_from_a_live_run_fails(answers, driver, monkeypatch):
    key = answer_cache.answer_key(DRIVER, answer_cache.vllm_release(VENV_PYTHON), LINE)
    right = driver.replay(SCENARIO)
    wrong = dict(right, final={**right["final"], "stats": {"requests": 99}})
    answer_cache.store(key, wrong)
    with VllmOracle() as oracle:
        assert oracle.replay(SCENARIO) == wrong  # unchecked, the kept answer is what is read
        assert oracle._proc is None
    monkeypatch.setenv(answer_cache.CHECK_ENV, "1")
    with pytest.raises(VllmOracleError, match="differs from a live run"):
        driver.replay(SCENARIO)
    answer_cache.store(key, right)
    assert driver.replay(SCENARIO) == right


def test_a_bad_check_fraction_is_refused(monkeypatch):
    monkeypatch.setenv(answer_cache.CHECK_ENV, "2")
    with pytest.raises(ValueError, match="EXPLORER_ORACLE_CHECK"):
        answer_cache.check_fraction()


def test_the_check_is_drawn_by_driver_and_release_once_per_process(monkeypatch):
    """EXPLORER_ORACLE_CHECK samples (driver, release) pairs: a pair's draw stays for the process,
    so a checked driver checks every cached answer it reads and an unchecked one starts no vLLM."""
    monkeypatch.setattr(answer_cache, "_DRAWS", {})
    monkeypatch.setenv(answer_cache.CHECK_ENV, "0.5")
    pairs = [(f"driver_{i}.py", release) for i in range(200) for release in RELEASES]
    first = [answer_cache.checks_driver(*pair) for pair in pairs]
    assert first == [answer_cache.checks_driver(*pair) for pair in pairs]  # drawn once
    assert 0.3 < sum(first) / len(first) < 0.7  # 400 draws at one half: 0.3-0.7 fails once in ~10^15
    monkeypatch.setenv(answer_cache.CHECK_ENV, "0")
    assert not any(answer_cache.checks_driver(*pair) for pair in pairs)
    monkeypatch.setenv(answer_cache.CHECK_ENV, "1")
    assert all(answer_cache.checks_driver(*pair) for pair in pairs)


_DRAWN = """
import json, sys
from tests.conformance import answer_cache
print(json.dumps([answer_cache.checks_driver(f"driver_{i}.py", "0.31.0") for i in range(100)]))
"""


def _drawn_in_a_process(run_id: str | None) -> list[bool]:
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_XDIST_TESTRUNUID"}
    env[answer_cache.CHECK_ENV] = "0.5"
    if run_id is not None:
        env["PYTEST_XDIST_TESTRUNUID"] = run_id
    out = subprocess.run([sys.executable, "-c", _DRAWN], cwd=ROOT, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout)


def test_the_workers_of_one_run_draw_the_same_pairs():
    """Parallel workers share the run's id (pytest-xdist's PYTEST_XDIST_TESTRUNUID), so they check
    the same pairs: a tenth of them per run, not a tenth per worker. Another run draws anew."""
    one, same, other = _drawn_in_a_process("run-a"), _drawn_in_a_process("run-a"), _drawn_in_a_process("run-b")
    assert one == same
    assert one != other  # 100 draws at one half alike by chance: once in 2^100
    assert 20 < sum(one) < 80
    assert _drawn_in_a_process(None) != _drawn_in_a_process(None)  # no workers: each process draws
