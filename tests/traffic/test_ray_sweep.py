"""`explorer sweep` on a real Ray (design section 16): a loopback cluster started with
`ray start --head`, cell-for-cell equality with serial `replay` runs, nothing left once the
cluster's processes are stopped, and Ctrl-C. Ray stays on 127.0.0.1 with a scratch temp dir and
home; every process of a test carries a tag in its environment, so "nothing left" is checked on
exactly ours, and only ours are stopped (`tests/ray_head.py`)."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from explorer.traffic.hashing import prepare
from explorer.traffic.packed import pack, unpack
from explorer.traffic.ray_sweep import Cell, plan_cells
from tests.ray_head import ray_env, start_head, stop_tagged, wait_none_left
from tests.traffic.helpers import run_cli, synthetic_lines, write


def test_packed_trace_round_trips(shared):
    prep = prepare(shared, 16, outputs=True, need_output_hashes=True)
    back = unpack(pack(prep), shared.source, need_output_hashes=True)
    assert back.trace == prep.trace
    assert back.prompt_hashes == prep.prompt_hashes and back.output_hashes == prep.output_hashes
    assert (back.block_size, back.outputs, back.blocks_hashed) == (16, True, prep.blocks_hashed)


def test_grid_multiplies_scheduler_cells_only():
    cells = plan_cells([16, 32], [10, 20], ["vllm", "unbounded", "scheduler"], ["async", "sync"])
    assert len(cells) == 2 * (2 + 1 + 2 * 2)
    assert Cell(32, "scheduler", 20, "sync") in cells and Cell(16, "unbounded", None) in cells


@pytest.fixture
def scratch():
    d = Path(tempfile.mkdtemp(prefix="rs", dir="/tmp"))  # short: Ray's socket paths must fit
    yield d
    shutil.rmtree(d, ignore_errors=True)


GRID = ["--num-blocks-list", "8,40", "--policy-list", "vllm,lru,scheduler", "--scheduler-list", "async,sync"]


def test_sweep_on_a_loopback_cluster_equals_serial_replays(tmp_path, scratch, capsys):
    trace = write(tmp_path, synthetic_lines(40, seed=3))
    tag = uuid.uuid4().hex
    try:
        address = start_head(scratch, tag)
        # the command keeps a loopback address on loopback itself: no single-machine setting given
        env = {k: v for k, v in ray_env(scratch, tag).items() if k != "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"}
        sweep = subprocess.run(
            [sys.executable, "-m", "explorer", "sweep", str(trace), *GRID, "--ray", address, "--json"],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        left = stop_tagged(tag)
    assert sweep.returncode == 0, sweep.stderr[-2000:]
    assert "8/8 cells" in sweep.stderr
    out = json.loads(sweep.stdout)
    assert out["backend"] == f"ray://{address}" and out["cells"] == 8 == len(out["results"])
    for r in out["results"]:
        argv = ["replay", str(trace), "--policy", r["policy"], "--num-blocks", str(r["num_blocks"]), "--json"]
        if r["policy"] == "scheduler":
            argv += ["--scheduler", r["scheduler"]]
        rc, printed, _ = run_cli(capsys, *argv)
        serial = json.loads(printed)
        assert rc == 0
        for key in ("block_size", "num_blocks", "requests", "skipped", "prompt_tokens", "hit_tokens", "hit_rate"):
            assert r[key] == serial[key], (r, key)
        assert r.get("figures") == serial.get("scheduler")
    assert {(r["policy"], r.get("scheduler")) for r in out["results"]} >= {("scheduler", "sync"), ("lru", None)}
    assert left == [], "a process of the cluster outlived SIGKILL"


def test_ctrl_c_cancels_the_sweep_and_leaves_no_worker(tmp_path, scratch):
    # cells long enough to be running when the interrupt comes: 5,000 requests, no sharing cap
    # (400 took about a second for the four cells once Ray's workers started from kept bytecode;
    # 5,000 take about 3 s on an idle machine, more on a busy one)
    trace = write(tmp_path, synthetic_lines(5000, seed=5))
    tag = uuid.uuid4().hex
    cmd = [sys.executable, "-m", "explorer", "sweep", str(trace), "--num-blocks-list", "30,60,90,120"]
    cmd += ["--policy-list", "scheduler", "--step-ms", "1"]
    proc = subprocess.Popen(cmd, env=ray_env(scratch, tag), stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    seen = ""
    deadline = time.monotonic() + 180
    while "0/4 cells" not in seen and time.monotonic() < deadline and proc.poll() is None:
        seen += proc.stderr.readline()
    assert "0/4 cells" in seen, seen[-2000:]
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    _, rest = proc.communicate(timeout=120)
    # the head of what followed the interrupt says why (Ray's native stack traces fill the tail)
    assert proc.returncode == 130, rest[:3000] + "\n...\n" + rest[-1000:]
    assert "4/4 cells" not in seen + rest
    assert wait_none_left(tag) == [], "a process of the sweep outlived Ctrl-C"


@pytest.mark.parametrize(
    "address,needle",
    [
        ("127.0.0.1:1", "--ray 127.0.0.1:1: no Ray cluster there (Connection refused)"),
        ("10.0.0.1", "not auto or HOST:PORT"),
    ],
)
def test_an_address_with_no_cluster_is_one_line_at_once(tmp_path, capsys, address, needle):
    # Ray would retry its GCS there for minutes: the command asks whether anything listens first
    trace = write(tmp_path, synthetic_lines(5, seed=1))
    rc, out, err = run_cli(capsys, "sweep", str(trace), "--num-blocks-list", "10", "--ray", address)
    assert (rc, out) == (2, "") and needle in err and err.count("\n") == 1, err
