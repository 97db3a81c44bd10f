"""`python -m explorer bench`: our engine against vLLM 0.31.0's on one long random scenario.

The scenario is one long random valid run from the randgen "bench" profile (shared system
prompts, long prompts, decoding, preemption, steady eviction; block size 16, sha256, events on;
3,000 ops on 600 blocks by default), written to a TOML file. Two comparisons, each the best of
``--repeat`` rounds that alternate the two sides, so that a load change on a shared machine hits
both alike:

- **run --json, whole.** Ours: ``run FILE --json`` as the command runs it (read the file with
  tomllib, validate, replay lean, encode the JSON), in this process after its imports. vLLM's:
  the conformance driver does the same with vLLM's own classes (read the same file with
  tomllib, normalize, replay, encode). Process start-up and imports are left out on both sides
  (vLLM's import alone takes many seconds). The target is ours at most half of vLLM's time.
- **op loop.** Only the loop over the ops, on both sides (parsing, engine construction and the
  JSON excluded).

The two replay JSONs must be identical. Not part of CI: the figures depend on the machine.

``--engine-steps`` benchmarks an engine-step scenario (design section 7) instead, under both
schedulers: requests sharing system prompts arrive between steps into a pool small enough to
preempt, and are stepped until done; ours (the mirrored scheduler) against vLLM's own Scheduler
and AsyncScheduler driven by vllm_drivers/vllm_sched_driver.py, with the same two
comparisons (vLLM's whole run includes building its scheduler, not its VllmConfig).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from explorer.scenario.cli import cmd_run
from explorer.scenario.engine import ScenarioEngine, replay
from explorer.scenario.parse import parse_scenario_dict
from explorer.scenario.randgen import random_scenario, scenario_tokens
from explorer.scenario.spec import Scenario
from explorer.scenario.write import dumps_scenario

REPO = Path(__file__).resolve().parents[1]
VLLM_PYTHON = REPO / ".venv-vllm" / "bin" / "python"
DRIVER = REPO / "vllm_drivers" / "vllm_driver.py"
SCHED_DRIVER = REPO / "vllm_drivers" / "vllm_sched_driver.py"
DEFAULT_OPS = 3000
DEFAULT_BLOCKS = 600
DEFAULT_REPEAT = 5


def bench_raw(num_ops: int, seed: int, num_blocks: int = DEFAULT_BLOCKS) -> dict[str, Any]:
    title = f"bench (seed {seed}, {num_ops} ops, {num_blocks} blocks)"
    return random_scenario(seed, num_ops, profile="bench", engine={"num_blocks": num_blocks}, title=title)


def bench_scenario(num_ops: int, seed: int, num_blocks: int = DEFAULT_BLOCKS) -> Scenario:
    return parse_scenario_dict(bench_raw(num_ops, seed, num_blocks), "<bench>")


def time_ours(scenario: Scenario, repeat: int = DEFAULT_REPEAT) -> tuple[list[float], dict[str, Any]]:
    """Seconds of each lean op loop, and the replay JSON of the last run."""
    seconds = []
    engine = ScenarioEngine(scenario, record=False)
    initial, steps = engine.snapshot(), []
    for _ in range(max(1, repeat)):
        engine = ScenarioEngine(scenario, record=False)
        initial = engine.snapshot()
        start = time.perf_counter()
        steps = [engine.apply(op) for op in scenario.ops]
        seconds.append(time.perf_counter() - start)
    return seconds, engine.trace(initial, steps).to_json()


def time_run_command(path: Path) -> tuple[float, str]:
    """Seconds of ``run FILE --json`` after start-up, and what it printed."""
    out = io.StringIO()
    start = time.perf_counter()
    with contextlib.redirect_stdout(out):
        rc = cmd_run(argparse.Namespace(file=str(path), json=True))
    seconds = time.perf_counter() - start
    if rc != 0:
        raise RuntimeError(f"run exited {rc} on the bench scenario")
    return seconds, out.getvalue()


class VllmSide:
    """The conformance driver in .venv-vllm, kept running across rounds (its import takes
    seconds)."""

    def __init__(self, driver: Path = DRIVER) -> None:
        env = dict(os.environ)
        env.pop("PYTHONHASHSEED", None)
        env.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
        self._stderr = tempfile.TemporaryFile(mode="w+b")  # noqa: SIM115 (lives as long as the child process)
        self.proc = subprocess.Popen(
            [str(VLLM_PYTHON), str(driver)],
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

    def _ask(self, message: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(message, separators=(",", ":")) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            self._stderr.seek(0)
            tail = self._stderr.read().decode("utf-8", "replace").strip().splitlines()[-5:]
            raise RuntimeError("the vLLM driver failed: " + " | ".join(tail))
        answer: dict[str, Any] = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"vLLM raised while replaying the bench scenario: {answer['error']}")
        return answer

    def op_loop(self, normalized: dict[str, Any]) -> tuple[float, dict[str, Any]]:
        answer = self._ask({**normalized, "timing": {"repeat": 1}})
        (seconds,) = answer.pop("timing")["replay_s"]
        return seconds, answer

    def run_file(self, path: Path) -> tuple[float, dict[str, Any]]:
        answer = self._ask({"toml_file": str(path)})
        return float(answer["whole_s"]), answer["result"]

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._stderr.close()


def _best(ours: list[float], vllm: list[float]) -> dict[str, Any]:
    out: dict[str, Any] = {"ours_s": round(min(ours), 4), "ours_runs_s": [round(s, 4) for s in ours]}
    if vllm:
        out |= {
            "vllm_s": round(min(vllm), 4),
            "vllm_runs_s": [round(s, 4) for s in vllm],
            "time_ratio": round(min(ours) / min(vllm), 3),  # < 1: ours is faster
        }
    return out


def run_bench(
    num_ops: int = DEFAULT_OPS,
    seed: int = 0,
    num_blocks: int = DEFAULT_BLOCKS,
    repeat: int = DEFAULT_REPEAT,
    with_vllm: bool = True,
) -> dict[str, Any]:
    raw = bench_raw(num_ops, seed, num_blocks)
    scenario = parse_scenario_dict(raw, "<bench>")
    vllm = VllmSide() if with_vllm and VllmSide.available() else None
    cmd_ours: list[float] = []
    cmd_vllm: list[float] = []
    loop_ours: list[float] = []
    loop_vllm: list[float] = []
    vllm_cmd_json = vllm_loop_json = None
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.toml"
        path.write_text(dumps_scenario(raw["title"], "", raw["engine"], raw["steps"]), encoding="utf-8")
        time_run_command(path)  # warm: the first call imports what `run` imports lazily
        try:
            for _ in range(max(1, repeat)):
                sec, printed = time_run_command(path)
                cmd_ours.append(sec)
                loop_ours += time_ours(scenario, 1)[0]
                if vllm is not None:
                    sec, vllm_cmd_json = vllm.run_file(path)
                    cmd_vllm.append(sec)
                    sec, vllm_loop_json = vllm.op_loop(scenario.normalized(scenario.engine.hash_seed or None))
                    loop_vllm.append(sec)
        finally:
            if vllm is not None:
                vllm.close()
    ours_json = json.loads(printed)
    steps, stats = ours_json["steps"], ours_json["final"]["stats"]
    counts: dict[str, int] = {}
    for op in scenario.ops:
        counts[op.op] = counts.get(op.op, 0) + 1
    result: dict[str, Any] = {
        "seed": seed,
        "ops": len(scenario.ops),
        "tokens": scenario_tokens(scenario),
        "op_counts": counts,
        "engine": scenario.engine.as_dict(),
        "events": sum(len(s["events"]) for s in steps),
        "evictions": sum(1 for s in steps for e in s["events"] if e["type"] == "BlockRemoved"),
        "failed_allocations": sum(1 for s in steps if s["op"] in ("admit", "decode", "generate") and not s["ok"]),
        "preemptions": counts.get("preempt", 0),
        "hit_rate": round(stats["hits"] / stats["queries"], 4) if stats["queries"] else 0.0,
        "repeat": max(1, repeat),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "run_command": _best(cmd_ours, cmd_vllm),
        "op_loop": _best(loop_ours, loop_vllm),
        "identical": None,
    }
    if vllm_cmd_json is not None:
        result["identical"] = ours_json == vllm_cmd_json == vllm_loop_json
    return result


def engine_step_raw(seed: int, scheduler: str, num_requests: int = 64, num_blocks: int = 100) -> dict[str, Any]:
    """An engine-step scenario: requests on four shared system prompts arrive one to three
    steps apart (budget 512 tokens, 16 sequences, a pool that preempts), then steps until every
    request is done (the drain is cut where the replay goes idle)."""
    rng = random.Random(f"bench-steps:{seed}")
    systems = [[s * 10_000 + i for i in range(rng.randint(64, 400))] for s in range(4)]
    steps: list[dict[str, Any]] = []
    work = 0
    for n in range(num_requests):
        prompt = rng.choice(systems) + [rng.randrange(50_000, 60_000) for _ in range(rng.randint(16, 200))]
        output = [rng.randrange(60_000, 61_000) for _ in range(rng.randint(8, 64))]
        steps.append({"op": "arrive", "id": f"R{n}", "prompt": prompt, "output": output})
        steps += [{"op": "step"}] * rng.randint(1, 3)
        work += len(output) + len(prompt) // 512 + 1
    steps += [{"op": "step"}] * work  # enough to drain: idle steps cost both sides alike
    engine = {"num_blocks": num_blocks, "scheduler": scheduler, "max_num_batched_tokens": 512, "max_num_seqs": 16}
    raw = {"title": f"engine-step bench ({scheduler}, seed {seed})", "engine": engine, "steps": steps}
    done = replay(parse_scenario_dict(raw, "<bench>"), record=False).to_json()["steps"]
    busy = max(i for i, st in enumerate(done) if st.get("scheduled") or st.get("outputs"))
    return {**raw, "steps": steps[: busy + 3]}


def run_step_bench(seed: int = 0, repeat: int = DEFAULT_REPEAT, with_vllm: bool = True) -> dict[str, Any]:
    vllm = VllmSide(SCHED_DRIVER) if with_vllm and VllmSide.available() else None
    result: dict[str, Any] = {"seed": seed, "repeat": max(1, repeat), "cpus": os.cpu_count(), "schedulers": {}}
    try:
        for scheduler in ("async", "sync"):
            raw = engine_step_raw(seed, scheduler)
            scenario = parse_scenario_dict(raw, "<bench>")
            normalized = scenario.normalized(scenario.engine.hash_seed or None)
            cmd: tuple[list[float], list[float]] = ([], [])
            loop: tuple[list[float], list[float]] = ([], [])
            theirs: list[dict[str, Any]] = []
            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / "bench.toml"
                path.write_text(dumps_scenario(raw["title"], "", raw["engine"], raw["steps"]), encoding="utf-8")
                time_run_command(path)  # warm
                for _ in range(max(1, repeat)):
                    sec, printed = time_run_command(path)
                    cmd[0].append(sec)
                    start = time.perf_counter()
                    replay(scenario, record=False)
                    loop[0].append(time.perf_counter() - start)
                    if vllm is not None:
                        sec, answer = vllm.run_file(path)
                        cmd[1].append(sec)
                        theirs.append(answer)
                        sec, answer = vllm.op_loop(normalized)
                        loop[1].append(sec)
                        theirs.append(answer)
            ours_json = json.loads(printed)
            result["schedulers"][scheduler] = {
                "ops": len(scenario.ops),
                "steps_scheduled": sum(1 for s in ours_json["steps"] if s.get("scheduled")),
                "preemptions": sum(len(s.get("preempted", ())) for s in ours_json["steps"]),
                "run_command": _best(*cmd),
                "op_loop": _best(*loop),
                "identical": None if vllm is None else all(t == ours_json for t in theirs),
            }
    finally:
        if vllm is not None:
            vllm.close()
    return result


def _print_steps(r: dict[str, Any]) -> None:
    out = sys.stdout.write
    out(f"engine-step bench (seed {r['seed']}), {r['cpus']} CPUs; best of {r['repeat']} alternating rounds\n")
    for scheduler, m in r["schedulers"].items():
        out(f"{scheduler}: {m['ops']:,} ops, {m['steps_scheduled']:,} batches, {m['preemptions']} preemptions\n")
        for key, what in (("run_command", "run --json, whole"), ("op_loop", "op loop only")):
            t = m[key]
            line = f"  {what}: ours {t['ours_s']:.3f} s"
            if "vllm_s" in t:
                line += f", vLLM {t['vllm_s']:.3f} s: ours takes {t['time_ratio']:.2f}x vLLM's time"
            out(line + "\n")
        out(f"  same replay JSON on both sides: {'not measured' if m['identical'] is None else m['identical']}\n")


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
        f"          {r['events']:,} KV events ({r['evictions']:,} evictions), {r['failed_allocations']:,} failed "
        f"allocations, hit rate {r['hit_rate']:.1%}\n"
    )
    out(f"machine:  {r['cpus']} CPUs, Python {r['python']}; best of {r['repeat']} alternating rounds\n")
    for key, what in (("run_command", "run --json, whole (start-up excluded)"), ("op_loop", "op loop only")):
        m = r[key]
        line = f"{what}:\n  ours  {m['ours_s']:.3f} s"
        if "vllm_s" in m:
            line += f"\n  vLLM  {m['vllm_s']:.3f} s\n  ours takes {m['time_ratio']:.2f}x vLLM's time"
            if key == "run_command":
                line += f" (target <= 0.50: {'met' if m['time_ratio'] <= 0.5 else 'NOT met'})"
        out(line + "\n")
    if r["identical"] is None:
        out("vLLM:     not measured (.venv-vllm is missing: bash tests/conformance/setup_vllm.sh)\n")
    else:
        out(f"same replay JSON on both sides: {'yes' if r['identical'] else 'NO'}\n")


def cmd_bench(args: argparse.Namespace) -> int:
    if getattr(args, "reasons", False):
        from explorer.traffic.reasons_bench import run_reasons_bench

        r = run_reasons_bench(300, (1000, 4000, 16000), args.repeat)
        sys.stdout.write(
            (
                json.dumps(r)
                if args.json
                else f"miss reasons: {r['replay_with_reasons_s']} s with, {r['replay_s']} s without = {r['reasons_ratio']}x; Belady {r['belady_s']} s"
            )
            + "\n"
        )
        return 0
    if getattr(args, "engine_steps", False):
        steps = run_step_bench(args.seed, args.repeat)
        if args.json:
            sys.stdout.write(json.dumps(steps) + "\n")
        else:
            _print_steps(steps)
        return 0 if all(m["identical"] in (None, True) for m in steps["schedulers"].values()) else 1
    result = run_bench(args.ops, args.seed, args.num_blocks, args.repeat)
    if args.json:
        sys.stdout.write(json.dumps(result) + "\n")
    else:
        _print_human(result)
    return 0 if result["identical"] in (None, True) else 1
