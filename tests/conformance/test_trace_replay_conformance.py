"""`replay`'s default policy against vLLM 0.31.0's own KVCacheManager on the same expansion.

vLLM's side is scripts/vllm_replay_trace.py, run with .venv-vllm's python; it hashes every
request with vLLM's own request block hasher. Every request's hit tokens must match, not just
the totals. Its answers are kept as the drivers' are (answer_cache.answer: keyed by the script's
sources, vLLM's release, the trace's bytes and the flags). A missing .venv-vllm fails these tests (install it with
`bash tests/conformance/setup_vllm.sh`).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
from pathlib import Path

import pytest

from explorer.cli import main as cli_main
from explorer.traffic.hashing import prepare
from explorer.traffic.sequential import replay_vllm
from explorer.traffic.trace import load_trace, shipped_trace_path
from tests.conformance import answer_cache

REPO = Path(__file__).resolve().parent.parent.parent
VLLM_PYTHON = REPO / ".venv-vllm" / "bin" / "python"
SCRIPT = REPO / "scripts" / "vllm_replay_trace.py"
ANSWER_FIELDS = ("requests", "skipped", "prompt_tokens", "hit_tokens", "hits")

pytestmark = pytest.mark.conformance


def vllm_replay(
    trace: Path, block_size: int, num_blocks: int, limit: int | None, outputs: bool, hashing: str = "plain"
) -> dict:
    if not VLLM_PYTHON.exists():
        pytest.fail(
            "vLLM oracle not installed: .venv-vllm/bin/python not found; "
            "install it with `bash tests/conformance/setup_vllm.sh`"
        )
    cmd = [
        str(VLLM_PYTHON),
        str(SCRIPT),
        str(trace),
        "--block-size",
        str(block_size),
        "--num-blocks",
        str(num_blocks),
        "--hashing",
        hashing,
        "--per-request",
    ]
    if limit:
        cmd += ["--limit", str(limit)]
    if outputs:
        cmd.append("--outputs")
    env = dict(os.environ)
    env.pop("PYTHONHASHSEED", None)
    env.setdefault("VLLM_LOGGING_LEVEL", "WARNING")

    def ask() -> dict:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=900)
        assert proc.returncode == 0, proc.stderr[-3000:]
        out = json.loads(proc.stdout.strip().splitlines()[-1])
        return {k: out[k] for k in ANSWER_FIELDS}  # not the timings: they differ run to run

    # The run is a function of the script's sources, vLLM's release, the trace and the flags.
    line = json.dumps({"trace_sha256": hashlib.sha256(trace.read_bytes()).hexdigest(), "argv": cmd[3:]})
    return answer_cache.answer(SCRIPT, VLLM_PYTHON, line, ask)


def ours(
    trace: Path, block_size: int, num_blocks: int, limit: int | None, outputs: bool, capsys
) -> tuple[dict, list[int]]:
    argv = ["replay", str(trace), "--block-size", str(block_size), "--num-blocks", str(num_blocks), "--json"]
    if limit:
        argv += ["--limit", str(limit)]
    if outputs:
        argv.append("--outputs")
    assert cli_main(argv) == 0
    summary = json.loads(capsys.readouterr().out)
    hits = replay_vllm(prepare(load_trace(trace, limit), block_size, outputs), num_blocks).hits
    return summary, hits


def check(trace: Path, block_size: int, num_blocks: int, limit: int | None, outputs: bool, capsys, hashing="plain"):
    mine, my_hits = ours(trace, block_size, num_blocks, limit, outputs, capsys)
    theirs = vllm_replay(trace, block_size, num_blocks, limit, outputs, hashing)
    for key in ("requests", "skipped", "prompt_tokens", "hit_tokens"):
        assert mine[key] == theirs[key], (key, mine[key], theirs[key])
    assert my_hits == theirs["hits"]
    return mine


def test_shipped_slice_with_evictions(capsys):
    """First 60 requests, block size 16, 5,000 blocks: the cache is far smaller than the slice
    (about 800K prompt tokens), so blocks are evicted all along and request 50's hit is cut
    short by them (our replay: 13,296 of the 29,184 tokens an unbounded cache would give)."""
    mine = check(shipped_trace_path(), 16, 5000, 60, False, capsys)
    assert mine["hit_tokens"] == 13296


def _shared_trace(path: Path, n: int = 80, seed: int = 1) -> Path:
    """Heavy prefix sharing, short prompts, outputs: many hits, evictions and skips at 40 blocks."""
    rng = random.Random(seed)
    chains = [[rng.randrange(500)] for _ in range(5)]
    fresh = 500
    lines = []
    for k in range(n):
        ids = list(rng.choice(chains)) + [fresh + i for i in range(rng.randint(0, 2))]
        fresh += 2
        if rng.random() < 0.3:
            chains.append(ids)
        n_tok = rng.randint(512 * (len(ids) - 1) + 1, 512 * len(ids))
        lines.append(
            json.dumps({"timestamp": k, "input_length": n_tok, "output_length": rng.randint(0, 60), "hash_ids": ids})
        )
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("outputs", [False, True])
def test_shared_prefixes_small_cache(tmp_path, capsys, outputs):
    trace = _shared_trace(tmp_path / "shared.jsonl")
    mine = check(trace, 16, 120, None, outputs, capsys, hashing="memo" if outputs else "plain")
    assert mine["hit_tokens"] > 0 and mine["skipped"] > 0
