"""Traces and command-line helpers the trace replay tests share."""

from __future__ import annotations

import json
import random
from pathlib import Path

from explorer.cli import main as cli_main
from explorer.traffic.trace import parse_trace_bytes
from tests.cli_run import run_explorer

REPO = Path(__file__).resolve().parents[2]
CONTRACT_KEYS = {
    "block_size",
    "num_blocks",
    "requests",
    "skipped",
    "prompt_tokens",
    "hit_tokens",
    "hit_rate",
    "tokens_per_s",
    # design section 14: why the rest missed, and the two bounds
    "miss_tokens",
    "bound_infinite",
    "bound_belady",
}


def line(ids, n, out=1, ts=0):
    return json.dumps({"timestamp": ts, "input_length": n, "output_length": out, "hash_ids": ids})


def write(tmp_path: Path, lines, name="t.jsonl") -> Path:
    p = tmp_path / name
    p.write_text("\n".join(lines) + "\n")
    return p


def trace_of(lines) -> object:
    return parse_trace_bytes(("\n".join(lines) + "\n").encode(), "t.jsonl")


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    rc = cli_main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


# block size 16, 10 blocks (9 usable). Free queue and evictions, step by step:
#  A [0] 64: 4 new blocks 1-4 (A0..A3), hit 0. Freed tail first: queue 5..9, A3, A2, A1, A0.
#  B [1] 80: 5 new 5-9 (B0..B4), hit 0. Queue A3 A2 A1 A0 B4 B3 B2 B1 B0.
#  C [0] 40: cap 2 blocks; A0, A1 hit = 32. 1 new block: block 4, evicting A3.
#            Its partial block goes to the front: queue 4 A2 B4 B3 B2 B1 B0 A1 A0.
#  D [0] 80: A0 A1 A2 hit, A3 gone = 48. New: block 4, then block 9 (evicts B4).
#  E [1] 80: cap 4 blocks; B0..B3 hit = 64. New: block 9 (evicts D4).
#  F [2, 3] 600: 38 blocks > 9: skipped (counts in prompt tokens, hits 0).
#  G [1] 81: cap 5 blocks; B0..B4 hit = 80. New: the head, block 4 (evicts A3 again).
#  H [0] 80: A0 A1 A2 hit, A3 gone = 48.
HAND = [
    line([0], 64),
    line([1], 80),
    line([0], 40),
    line([0], 80),
    line([1], 80),
    line([2, 3], 600),
    line([1], 81),
    line([0], 80),
]
HAND_HITS = [0, 0, 32, 48, 64, 0, 80, 48]


def synthetic_lines(n: int, seed: int = 0) -> list[str]:
    """A trace with heavy prefix sharing: requests extend a few shared chains of ids."""
    rng = random.Random(seed)
    chains = [[rng.randrange(1000)] for _ in range(6)]
    fresh = 1000
    lines = []
    for k in range(n):
        base = list(rng.choice(chains))
        for _ in range(rng.randint(0, 3)):
            base.append(fresh)
            fresh += 1
        if rng.random() < 0.3:
            chains.append(base)
        n_tok = rng.randint(512 * (len(base) - 1) + 1, 512 * len(base))
        lines.append(line(base, n_tok, out=rng.randint(0, 40), ts=10 * k))
    return lines


def cli(*args, cwd=REPO):
    return run_explorer("replay", *args, cwd=cwd)


def assert_bad(proc, *needles):
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    for n in needles:
        assert n in lines[0], lines[0]


BAD_LINES = [
    ("{not json", "line 2", "not JSON"),
    ("[1, 2]", "line 2", "JSON object"),
    ('{"timestamp": 0, "input_length": 5, "hash_ids": [1]}', "line 2", "output_length"),
    ('{"input_length": 5, "output_length": 1, "hash_ids": [1]}', "line 2", "timestamp"),
    ('{"timestamp": 0, "input_length": 5, "output_length": 1}', "line 2", "hash_ids"),
    ('{"timestamp": 0, "input_length": -5, "output_length": 1, "hash_ids": [1]}', "line 2", "negative"),
    ('{"timestamp": 0, "input_length": 5, "output_length": -1, "hash_ids": [1]}', "line 2", "negative"),
    ('{"timestamp": 0, "input_length": 0, "output_length": 1, "hash_ids": [1]}', "line 2", "input_length"),
    (
        '{"timestamp": 0, "input_length": 1025, "output_length": 1, "hash_ids": [1, 2]}',
        "line 2",
        "beyond its 2 hash ids",
    ),
    ('{"timestamp": 0, "input_length": 5.5, "output_length": 1, "hash_ids": [1]}', "line 2", "integer"),
    ('{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [-1]}', "line 2", "hash_ids[0]"),
    ('{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": []}', "line 2", "hash_ids"),
    ('{"timestamp": -1, "input_length": 5, "output_length": 1, "hash_ids": [1]}', "line 2", "timestamp"),
    ('{"timestamp": 0, "input_length": 5, "output_length": 2000000, "hash_ids": [1]}', "line 2", "max_model_len"),
]
