"""`explorer sweep` on a real Ray (design section 16): a loopback cluster started with
`ray start --head`, cell-for-cell equality with serial `replay` runs, nothing left after
`ray stop`, and Ctrl-C. Ray stays on 127.0.0.1 with a scratch temp dir and home; every process
of a test carries a tag in its environment, so "nothing left" is checked on exactly ours."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
import warnings
from pathlib import Path

import pytest

from explorer.traffic.hashing import prepare
from explorer.traffic.packed import pack, unpack
from explorer.traffic.ray_sweep import Cell, plan_cells
from tests.traffic.helpers import REPO, run_cli, synthetic_lines, write

RAY = Path(sys.executable).with_name("ray")
TAG = "EXPLORER_SWEEP_TEST_TAG"


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


def _env(scratch: Path, tag: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(HOME=str(scratch), RAY_TMPDIR=str(scratch), TMPDIR=str(scratch), RAY_worker_niceness="0")
    env.update(RAY_USAGE_STATS_ENABLED="0", PYTHONPATH=str(REPO), **{TAG: tag})
    # single-machine mode: else Ray swaps 127.0.0.1 for the machine's outward address
    env["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    return env


def _tagged(tag: str) -> list[int]:
    """Live processes whose environment carries ``tag`` (zombies have none)."""
    pids = []
    needle = f"{TAG}={tag}".encode()
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if needle in (d / "environ").read_bytes():
                    pids.append(int(d.name))
            except OSError:
                pass
    return pids


def _wait_none_left(tag: str, seconds: float = 30.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while (left := _tagged(tag)) and time.monotonic() < deadline:
        time.sleep(0.5)
    return left


def _report_non_loopback(tag: str) -> None:
    """Warn about (never use) any listening TCP socket of ours that is not on 127.0.0.1."""
    inodes = set()
    for pid in _tagged(tag):
        try:
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                link = os.readlink(fd)
                if link.startswith("socket:["):
                    inodes.add(link[8:-1])
        except OSError:
            pass
    wide = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for row in Path(table).read_text().splitlines()[1:]:
            f = row.split()
            if (
                f[3] == "0A"
                and f[9] in inodes
                and not f[1].startswith(
                    ("0100007F", "00000000000000000000000001000000", "0000000000000000FFFF00000100007F")
                )
            ):
                wide.append(f[1])
    if wide:
        warnings.warn(f"Ray listens beyond loopback (reported, not used): {wide}", stacklevel=2)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def scratch():
    d = Path(tempfile.mkdtemp(prefix="rs", dir="/tmp"))  # short: Ray's socket paths must fit
    yield d
    shutil.rmtree(d, ignore_errors=True)


GRID = ["--num-blocks-list", "8,40", "--policy-list", "vllm,lru,scheduler", "--scheduler-list", "async,sync"]


def test_sweep_on_a_loopback_cluster_equals_serial_replays(tmp_path, scratch, capsys):
    trace = write(tmp_path, synthetic_lines(40, seed=3))
    tag, port = uuid.uuid4().hex, _free_port()
    env = _env(scratch, tag)
    head = [str(RAY), "start", "--head", "--node-ip-address", "127.0.0.1", "--port", str(port)]
    head += ["--temp-dir", str(scratch / "ray"), "--num-cpus", "2", "--include-dashboard", "false"]
    try:
        subprocess.run(head, env=env, check=True, capture_output=True, timeout=120)
        _report_non_loopback(tag)
        sweep = subprocess.run(
            [sys.executable, "-m", "explorer", "sweep", str(trace), *GRID, "--ray", f"127.0.0.1:{port}", "--json"],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        subprocess.run([str(RAY), "stop", "--force"], env=env, capture_output=True, timeout=120)
    assert sweep.returncode == 0, sweep.stderr[-2000:]
    assert "8/8 cells" in sweep.stderr
    out = json.loads(sweep.stdout)
    assert out["backend"] == f"ray://127.0.0.1:{port}" and out["cells"] == 8 == len(out["results"])
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
    assert _wait_none_left(tag) == [], "a process of the cluster outlived ray stop"


def test_ctrl_c_cancels_the_sweep_and_leaves_no_worker(tmp_path, scratch):
    # cells long enough to be running when the interrupt comes: 400 requests, no sharing cap
    trace = write(tmp_path, synthetic_lines(400, seed=5))
    tag = uuid.uuid4().hex
    cmd = [sys.executable, "-m", "explorer", "sweep", str(trace), "--num-blocks-list", "30,60,90,120"]
    cmd += ["--policy-list", "scheduler", "--step-ms", "1"]
    proc = subprocess.Popen(cmd, env=_env(scratch, tag), stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    seen = ""
    deadline = time.monotonic() + 180
    while "0/4 cells" not in seen and time.monotonic() < deadline and proc.poll() is None:
        seen += proc.stderr.readline()
    assert "0/4 cells" in seen, seen[-2000:]
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    _, rest = proc.communicate(timeout=120)
    # the head of what followed the interrupt says why (Ray's native stack traces fill the tail)
    assert proc.returncode == 130, rest[:3000] + "\n...\n" + rest[-1000:]
    assert "4/4 cells" not in seen + rest
    assert _wait_none_left(tag) == [], "a process of the sweep outlived Ctrl-C"
