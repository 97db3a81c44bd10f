"""`python -m explorer bench`: our engine core against vLLM 0.31.0's on one long scenario.

The scenario is one long random valid run from explorer.randgen's "bench" profile (shared
system prompts, long prompts, decoding, steady eviction pressure; block size 16, sha256,
events on). Our side replays it lean (`ScenarioEngine(record=False)`: no per-step snapshots or
panel records, which only the UI needs). vLLM's side, when ``.venv-vllm`` exists, replays the
same normalized ops in its own classes through the conformance driver in a subprocess. Each
side times only its op loop (imports, parsing, engine construction and JSON excluded); rounds
alternate the two sides, the best round of each counts, and the two replay JSONs are compared.

Tokens per second counts the tokens the scenario pushes through: every prompt plus every
sampled or generated token. Not part of CI: the figures depend on the machine.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from explorer.scenario.engine import ScenarioEngine
from explorer.scenario.parse import parse_scenario_dict
from explorer.scenario.randgen import random_scenario, scenario_tokens
from explorer.scenario.spec import Scenario

REPO = Path(__file__).resolve().parents[1]
VLLM_PYTHON = REPO / ".venv-vllm" / "bin" / "python"
DRIVER = REPO / "tests" / "conformance" / "vllm_driver.py"
DEFAULT_REPEAT = 5


def bench_scenario(num_ops: int, seed: int) -> Scenario:
    raw = random_scenario(seed, num_ops, profile="bench", title=f"bench (seed {seed}, {num_ops} ops)")
    return parse_scenario_dict(raw, "<bench>")


def _lean_loop(scenario: Scenario, hash_seed: str | None = None) -> tuple[float, ScenarioEngine, Any, list]:
    engine = ScenarioEngine(scenario, hash_seed, record=False)
    initial = engine.snapshot()
    apply = engine.apply
    ops = scenario.ops
    start = time.perf_counter()
    steps = [apply(op) for op in ops]
    return time.perf_counter() - start, engine, initial, steps


def _trace_json(scenario: Scenario, engine: ScenarioEngine, initial, steps: list) -> dict[str, Any]:
    return engine.trace(initial, steps).to_json()


def time_ours(scenario: Scenario, repeat: int = DEFAULT_REPEAT) -> tuple[list[float], dict[str, Any]]:
    """Seconds of each lean op loop, and the replay JSON of the last run."""
    seconds = []
    for _ in range(max(1, repeat)):
        sec, engine, initial, steps = _lean_loop(scenario)
        seconds.append(sec)
    return seconds, _trace_json(scenario, engine, initial, steps)


class VllmSide:
    """The conformance driver in .venv-vllm, kept running across rounds (its import takes
    seconds); each round replays the scenario once in vLLM's classes and reports the seconds of
    its op loop."""

    def __init__(self) -> None:
        env = dict(os.environ)
        env.pop("PYTHONHASHSEED", None)
        env.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
        self._stderr = tempfile.TemporaryFile(mode="w+b")  # noqa: SIM115 (lives as long as the child process)
        self.proc = subprocess.Popen(
            [str(VLLM_PYTHON), str(DRIVER)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            encoding="utf-8",
            cwd=str(REPO),
            env=env,
        )

    @staticmethod
    def available() -> bool:
        return VLLM_PYTHON.exists() and DRIVER.exists()

    def replay(self, normalized: dict[str, Any]) -> tuple[float, dict[str, Any]]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({**normalized, "timing": {"repeat": 1}}, separators=(",", ":")) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            self._stderr.seek(0)
            tail = self._stderr.read().decode("utf-8", "replace").strip().splitlines()[-5:]
            raise RuntimeError("the vLLM driver failed: " + " | ".join(tail))
        answer = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"vLLM raised while replaying the bench scenario: {answer['error']}")
        (seconds,) = answer.pop("timing")["replay_s"]
        return seconds, answer

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._stderr.close()


def _rates(seconds: list[float], ops: int, tokens: int) -> dict[str, Any]:
    best = min(seconds)
    return {
        "seconds": round(best, 4),
        "runs_s": [round(s, 4) for s in seconds],
        "ops_per_s": round(ops / best, 1),
        "tokens_per_s": round(tokens / best, 1),
    }


def run_bench(num_ops: int, seed: int, repeat: int = DEFAULT_REPEAT, with_vllm: bool = True) -> dict[str, Any]:
    """Rounds alternate our replay and vLLM's, so that a load change on a shared machine hits
    both sides alike; each side's best round counts."""
    scenario = bench_scenario(num_ops, seed)
    ops, tokens = len(scenario.ops), scenario_tokens(scenario)
    vllm = VllmSide() if with_vllm and VllmSide.available() else None
    # A drawn xxhash seed is drawn once, for every round and both sides; otherwise vLLM
    # resolves the seed itself (its default for sha256).
    cfg = scenario.engine
    pinned = cfg.resolve_seed() if cfg.hash_algo.startswith("xxhash") and not cfg.hash_seed else None
    normalized = scenario.normalized(pinned or cfg.hash_seed or None)
    ours_s: list[float] = []
    vllm_s: list[float] = []
    vllm_json = None
    try:
        for _ in range(max(1, repeat)):
            sec, engine, initial, steps = _lean_loop(scenario, pinned)
            ours_s.append(sec)
            if vllm is not None:
                sec, vllm_json = vllm.replay(normalized)
                vllm_s.append(sec)
    finally:
        if vllm is not None:
            vllm.close()
    ours_json = _trace_json(scenario, engine, initial, steps)
    counts: dict[str, int] = {}
    for op in scenario.ops:
        counts[op.op] = counts.get(op.op, 0) + 1
    steps = ours_json["steps"]
    stats = ours_json["final"]["stats"]
    result: dict[str, Any] = {
        "seed": seed,
        "ops": ops,
        "tokens": tokens,
        "op_counts": counts,
        "engine": scenario.engine.as_dict(),
        "events": sum(len(s["events"]) for s in steps),
        "evictions": sum(1 for s in steps for e in s["events"] if e["type"] == "BlockRemoved"),
        "failed_allocations": sum(1 for s in steps if s["op"] in ("admit", "decode", "generate") and not s["ok"]),
        "hit_rate": round(stats["hits"] / stats["queries"], 4) if stats["queries"] else 0.0,
        "repeat": max(1, repeat),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "ours": _rates(ours_s, ops, tokens),
        "vllm": None,
        "ratio": None,
        "identical": None,
    }
    if vllm_json is not None:
        result["vllm"] = _rates(vllm_s, ops, tokens)
        result["ratio"] = round(min(vllm_s) / min(ours_s), 3)  # > 1: ours is faster
        result["identical"] = json.loads(json.dumps(ours_json)) == vllm_json
    return result


def _print_human(r: dict[str, Any]) -> None:
    e = r["engine"]
    out = sys.stdout.write
    out(
        f"scenario: {r['ops']:,} ops (seed {r['seed']}), {r['tokens']:,} tokens (prompts + outputs), "
        f"block_size {e['block_size']}, {e['num_blocks']:,} blocks, {e['hash_algo']}, events "
        f"{'on' if e['events'] else 'off'}\n"
    )
    out("          " + ", ".join(f"{k} {v:,}" for k, v in sorted(r["op_counts"].items())) + "\n")
    out(
        f"          {r['events']:,} KV events ({r['evictions']:,} evictions), {r['failed_allocations']:,} failed allocations, "
        f"hit rate {r['hit_rate']:.1%}\n"
    )
    out(f"machine:  {r['cpus']} CPUs, Python {r['python']}; best of {r['repeat']} alternating rounds, op loop only\n")
    o = r["ours"]
    out(f"ours:     {o['ops_per_s']:>12,.0f} ops/s {o['tokens_per_s']:>14,.0f} tokens/s   ({o['seconds']:.3f} s)\n")
    v = r["vllm"]
    if v is None:
        out("vLLM:     not measured (.venv-vllm is missing: bash tests/conformance/setup_vllm.sh)\n")
        return
    out(f"vLLM:     {v['ops_per_s']:>12,.0f} ops/s {v['tokens_per_s']:>14,.0f} tokens/s   ({v['seconds']:.3f} s)\n")
    out(f"ratio:    ours is {r['ratio']:.2f}x vLLM's speed; same replay JSON: {'yes' if r['identical'] else 'NO'}\n")


def cmd_bench(args) -> int:
    repeat = getattr(args, "repeat", DEFAULT_REPEAT)
    result = run_bench(args.ops, args.seed, repeat)
    if args.json:
        sys.stdout.write(json.dumps(result) + "\n")
    else:
        _print_human(result)
    return 0 if result["identical"] in (None, True) else 1
