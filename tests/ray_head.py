"""A Ray head on loopback for tests, and the processes of one test found and stopped by a tag.

Every process a test starts for Ray carries ``TAG=<its tag>`` in its environment (Ray's
daemons and workers inherit it), so a test checks "nothing left" on exactly its own processes
and stops exactly those: `ray stop` would stop every Ray process on the machine, another
test's (or a developer's) cluster included. Ray stays on 127.0.0.1 with a scratch temp dir
and home (design section 16).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RAY = Path(sys.executable).with_name("ray")
TAG = "EXPLORER_SWEEP_TEST_TAG"


def ray_env(scratch: Path, tag: str) -> dict[str, str]:
    """This process's environment for a Ray process of the test tagged ``tag``."""
    env = dict(os.environ)
    env.update(HOME=str(scratch), RAY_TMPDIR=str(scratch), TMPDIR=str(scratch), RAY_worker_niceness="0")
    env.update(RAY_USAGE_STATS_ENABLED="0", PYTHONPATH=str(REPO), **{TAG: tag})
    # single-machine mode: else Ray swaps 127.0.0.1 for the machine's outward address
    env["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_head(scratch: Path, tag: str) -> str:
    """`ray start --head` on 127.0.0.1 (two CPUs, no dashboard); its address ``127.0.0.1:PORT``."""
    port = free_port()
    head = [str(RAY), "start", "--head", "--node-ip-address", "127.0.0.1", "--port", str(port)]
    head += ["--temp-dir", str(scratch / "ray"), "--num-cpus", "2", "--include-dashboard", "false"]
    subprocess.run(head, env=ray_env(scratch, tag), check=True, capture_output=True, timeout=120)
    report_non_loopback(tag)
    return f"127.0.0.1:{port}"


def tagged(tag: str) -> list[int]:
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


def wait_none_left(tag: str, seconds: float = 30.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while (left := tagged(tag)) and time.monotonic() < deadline:
        time.sleep(0.5)
    return left


def stop_tagged(tag: str, seconds: float = 30.0) -> list[int]:
    """Kill the processes tagged ``tag``, as `ray stop --force` kills Ray's (Ray's GCS server and
    raylet outlast a SIGTERM by more than 20 s); the pids still there after ``seconds``."""
    for pid in tagged(tag):
        with contextlib.suppress(OSError):  # it ended meanwhile
            os.kill(pid, signal.SIGKILL)
    return wait_none_left(tag, seconds)


def report_non_loopback(tag: str) -> None:
    """Warn about (never use) any listening TCP socket of ours that is not on 127.0.0.1."""
    inodes = set()
    for pid in tagged(tag):
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
