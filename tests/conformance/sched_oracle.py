"""Talk to vLLM 0.31.0's own Scheduler / AsyncScheduler from the project's test environment.

``VllmSchedOracle`` is ``VllmOracle`` (tests/conformance/oracle.py) running
``vllm_sched_driver.py`` instead: one long-lived process inside ``.venv-vllm``, started on
first use (importing vLLM and building the first ModelConfig take seconds, a scenario
milliseconds). It reads normalized engine-step scenarios (``engine_step_scenarios.normalize``)
and answers the engine-step replay JSON; ``oracle.compare`` diffs two such answers.

The goldens of tests/scenario/golden/engine_steps/ carry vLLM's recorded answers beside them
(``NAME.vllm.json``); re-record them, after checking why they changed, with
    .venv/bin/python -m tests.conformance.sched_oracle record

This module runs in the project's virtualenv; it never imports vLLM.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.conformance.oracle import DRIVERS, REPO_ROOT, VllmOracle, compare
from vllm_drivers.engine_step_scenarios import load_toml

SCHED_DRIVER = DRIVERS / "vllm_sched_driver.py"
ASYNC_DRAFTS_DRIVER = DRIVERS / "vllm_sched_async_drafts_driver.py"
ASYNC_CONNECTOR_DRAFTS_DRIVER = DRIVERS / "vllm_sched_async_connector_drafts_driver.py"
OFFLOADING_GROUPS_DRIVER = DRIVERS / "vllm_sched_offloading_groups_driver.py"
GOLDEN_DIR = REPO_ROOT / "tests" / "scenario" / "golden" / "engine_steps"

__all__ = [
    "GOLDEN_DIR",
    "VllmSchedAsyncConnectorDraftsOracle",
    "VllmSchedAsyncDraftsOracle",
    "VllmSchedOffloadingGroupsOracle",
    "VllmSchedOracle",
    "compare",
    "expected_path",
    "golden_paths",
    "oracle_kind",
    "read_expected",
]


class VllmSchedOracle(VllmOracle):
    """One vllm_sched_driver.py process; ``replay`` sends an engine-step scenario, gets JSON.

    Missing ``.venv-vllm`` is an error (``VllmOracleError``), never a skip.
    """

    driver = SCHED_DRIVER

    def replay_toml(self, path: str | Path) -> dict:
        return self.replay(load_toml(path))


class VllmSchedAsyncDraftsOracle(VllmSchedOracle):
    """vllm_sched_async_drafts_driver.py: speculative decoding under the async scheduler (the
    played model runner as vLLM's worker keeps the drafts); no other scenario."""

    driver = ASYNC_DRAFTS_DRIVER


class VllmSchedAsyncConnectorDraftsOracle(VllmSchedOracle):
    """vllm_sched_async_connector_drafts_driver.py: a KV connector with speculative decoding
    under the async scheduler; no other scenario."""

    driver = ASYNC_CONNECTOR_DRAFTS_DRIVER


class VllmSchedOffloadingGroupsOracle(VllmSchedOracle):
    """vllm_sched_offloading_groups_driver.py: the offloading connector with kv_cache_groups
    (each completed store's events in token, then group order); no other scenario."""

    driver = OFFLOADING_GROUPS_DRIVER


def oracle_kind(scenario) -> type[VllmSchedOracle]:
    """The driver an engine-step scenario (parsed, or normalized) is asked of: the offloading
    connector with kv_cache_groups goes to the offloading-groups driver; else drafts under the
    async scheduler go to the async-drafts driver (with a KV connector, to the async
    connector-drafts driver), everything else to vllm_sched_driver.py."""
    if isinstance(scenario, dict):  # a normalized scenario (engine_step_scenarios.normalize)
        eng = scenario["engine"]
        drafts_under_async = eng.get("scheduler") == "async" and bool(eng.get("speculative"))
        connector = bool(eng.get("kv_connector"))
        offloading_groups = (eng.get("kv_connector") or {}).get("kind") == "offloading" and bool(
            eng.get("kv_cache_groups")
        )
    else:
        sched, spec = getattr(scenario, "sched", None), getattr(scenario, "speculative", None)
        drafts_under_async = sched is not None and sched.scheduler == "async" and spec is not None
        kv = getattr(scenario, "connector", None)
        connector = kv is not None
        offloading_groups = kv is not None and kv.kind == "offloading" and getattr(scenario, "groups", None) is not None
    if offloading_groups:
        return VllmSchedOffloadingGroupsOracle
    if drafts_under_async and connector:
        return VllmSchedAsyncConnectorDraftsOracle
    return VllmSchedAsyncDraftsOracle if drafts_under_async else VllmSchedOracle


def golden_paths() -> list[Path]:
    return sorted(GOLDEN_DIR.glob("*.toml"))


def expected_path(toml_path: Path) -> Path:
    """vLLM's recorded answer beside a golden: NAME.toml -> NAME.vllm.json."""
    return toml_path.with_suffix(".vllm.json")


def read_expected(toml_path: Path) -> dict:
    return json.loads(expected_path(toml_path).read_text(encoding="utf-8"))


def format_answer(result: dict) -> str:
    """The recorded form: one step a line, then the final state, so a diff names the step."""
    steps = ",\n  ".join(json.dumps(step, separators=(",", ":")) for step in result["steps"])
    final = json.dumps(result["final"], separators=(",", ":"))
    return f'{{"steps": [\n  {steps}\n ],\n "final": {final}}}\n'


def record(paths: list[Path] | None = None) -> list[Path]:
    """Replay every golden through vLLM and write its NAME.vllm.json."""
    from explorer.scenario.parse import load_scenario

    written = []
    oracles: dict[type[VllmSchedOracle], VllmSchedOracle] = {}
    try:
        for path in paths or golden_paths():
            kind = oracle_kind(load_scenario(path))
            oracle = oracles.setdefault(kind, kind())
            expected_path(path).write_text(format_answer(oracle.replay_toml(path)), encoding="utf-8")
            written.append(expected_path(path))
    finally:
        for oracle in oracles.values():
            oracle.close()
    return written


if __name__ == "__main__":
    if sys.argv[1:] != ["record"]:
        sys.exit("usage: python -m tests.conformance.sched_oracle record")
    for p in record():
        print(p.relative_to(REPO_ROOT))
