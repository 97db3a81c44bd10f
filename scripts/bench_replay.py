"""Benchmark (not CI): prompt tokens per second of `replay`, our core against vLLM 0.31.0's.

Both sides replay the same expansion of the same trace slice with the default policy (one
request at a time, file order) and must report the same hit tokens. Two hashing modes, each
run on both sides:

- plain: every Request hashes its whole prompt with the library's own request block hasher
  when it is built, as in a real engine;
- memo: the block hashes of each distinct chain of trace ids are computed once with the
  library's own ``hash_block_tokens`` and handed to the Request (what `replay` ships).

Our side runs in this process, vLLM's in a subprocess with ``.venv-vllm``'s python
(scripts/vllm_replay_trace.py). Times exclude start-up and trace parsing. Wall time is what a
user waits; CPU time (each side is one thread) is steadier on a shared machine, and the ratio
is given for both. With ``--repeat N`` each side runs N times and the fastest run counts.

    .venv/bin/python scripts/bench_replay.py                 # first 500 requests
    .venv/bin/python scripts/bench_replay.py --limit 0       # the full trace (minutes)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from explorer.traffic.hashing import prepare  # noqa: E402
from explorer.traffic.sequential import replay_vllm, replay_vllm_plain  # noqa: E402
from explorer.traffic.trace import load_trace  # noqa: E402

VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
VLLM_SCRIPT = ROOT / "scripts" / "vllm_replay_trace.py"
DEFAULT_TRACE = ROOT / "data" / "mooncake_synthetic_trace.jsonl"


def ours(trace, args, hashing: str) -> dict:
    w0, c0 = time.perf_counter(), time.process_time()
    if hashing == "memo":
        prep = prepare(trace, args.block_size, args.outputs)
        r = replay_vllm(prep, args.num_blocks)
    else:
        r = replay_vllm_plain(trace, args.block_size, args.num_blocks, args.outputs)
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    return {
        "hit_tokens": r.hit_tokens,
        "skipped": r.skipped,
        "prompt_tokens": r.prompt_tokens,
        "seconds": wall,
        "cpu_seconds": cpu,
    }


def vllm(args, hashing: str) -> dict:
    if not VLLM_PYTHON.exists():
        raise SystemExit(".venv-vllm is missing: install it with `bash tests/conformance/setup_vllm.sh`")
    cmd = [
        str(VLLM_PYTHON),
        str(VLLM_SCRIPT),
        str(args.trace),
        "--block-size",
        str(args.block_size),
        "--num-blocks",
        str(args.num_blocks),
        "--hashing",
        hashing,
    ]
    if args.limit:
        cmd += ["--limit", str(args.limit)]
    if args.outputs:
        cmd.append("--outputs")
    env = dict(os.environ)
    env.pop("PYTHONHASHSEED", None)
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    if proc.returncode != 0:
        raise SystemExit(f"vLLM side failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trace", default=str(DEFAULT_TRACE))
    ap.add_argument("--limit", type=int, default=500, help="first N requests (0: the whole trace)")
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--num-blocks", type=int, default=10000)
    ap.add_argument("--outputs", action="store_true")
    ap.add_argument("--modes", default="plain,memo")
    ap.add_argument("--repeat", type=int, default=1, help="runs per side; the fastest counts")
    ap.add_argument("--no-vllm", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    args.limit = args.limit or None

    trace = load_trace(args.trace, args.limit)
    rows = []

    def best(runs: list[dict]) -> dict:
        return {**min(runs, key=lambda r: r["seconds"]), "cpu_seconds": min(r["cpu_seconds"] for r in runs)}

    for mode in args.modes.split(","):
        o = best([ours(trace, args, mode) for _ in range(max(1, args.repeat))])
        v = None if args.no_vllm else best([vllm(args, mode) for _ in range(max(1, args.repeat))])
        if v is not None and v["hit_tokens"] != o["hit_tokens"]:
            raise SystemExit(f"MISMATCH ({mode}): ours {o['hit_tokens']} hit tokens, vLLM {v['hit_tokens']}")
        rows.append((mode, o, v))

    n_tok = trace.prompt_tokens
    report = {
        "trace": Path(args.trace).name,
        "requests": len(trace.requests),
        "prompt_tokens": n_tok,
        "block_size": args.block_size,
        "num_blocks": args.num_blocks,
        "outputs": args.outputs,
        "modes": {},
    }
    for mode, o, v in rows:
        entry = {
            "hit_tokens": o["hit_tokens"],
            "ours_tokens_per_s": n_tok / o["seconds"],
            "ours_cpu_tokens_per_s": n_tok / o["cpu_seconds"],
        }
        if v is not None:
            entry.update(
                {
                    "vllm_tokens_per_s": n_tok / v["seconds"],
                    "vllm_cpu_tokens_per_s": n_tok / v["cpu_seconds"],
                    "ratio_wall": v["seconds"] / o["seconds"],
                    "ratio_cpu": v["cpu_seconds"] / o["cpu_seconds"],
                }
            )
        report["modes"][mode] = entry
    if args.json:
        print(json.dumps(report))
        return 0
    print(
        f"{report['trace']}: {report['requests']:,} requests, {n_tok:,} prompt tokens, "
        f"block size {args.block_size}, {args.num_blocks:,} blocks" + (", outputs" if args.outputs else "")
    )
    print(
        f"{'hashing':<8} {'hit tokens':>12} {'ours tok/s':>12} {'vLLM tok/s':>12} {'ours/vLLM':>10}   (CPU: ours, vLLM, ratio)"
    )
    for mode, e in report["modes"].items():
        if "vllm_tokens_per_s" in e:
            print(
                f"{mode:<8} {e['hit_tokens']:>12,} {e['ours_tokens_per_s']:>12,.0f} {e['vllm_tokens_per_s']:>12,.0f} "
                f"{e['ratio_wall']:>9.2f}x   ({e['ours_cpu_tokens_per_s']:,.0f}, {e['vllm_cpu_tokens_per_s']:,.0f}, "
                f"{e['ratio_cpu']:.2f}x)"
            )
        else:
            print(f"{mode:<8} {e['hit_tokens']:>12,} {e['ours_tokens_per_s']:>12,.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
