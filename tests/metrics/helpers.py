"""Shared by the metrics tests: reading an exposition, starting `metrics --serve`."""

from __future__ import annotations

import re
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LESSON = REPO / "lessons" / "10_metrics.toml"
LABELS = '{engine="0",model_name="explorer"}'


def sample(text: str, name: str, labels: str = LABELS) -> float:
    """The value of one sample line of an exposition."""
    for line in text.splitlines():
        if line.startswith(name + labels + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no sample {name}{labels}")


def start_server(scenario: Path, pace: float, memory: int | None = None) -> tuple[subprocess.Popen, int]:
    """`metrics --serve 0`; the port it bound, read from its first stderr line. ``memory``: a
    limit on the server's address space (RLIMIT_AS, bytes)."""

    def limit() -> None:
        if memory is not None:
            resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

    proc = subprocess.Popen(
        [sys.executable, "-m", "explorer", "metrics", str(scenario), "--serve", "0", "--pace", str(pace)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=limit,
    )
    assert proc.stderr is not None
    line = proc.stderr.readline()
    m = re.search(r"http://127\.0\.0\.1:(\d+)/metrics", line)
    if m is None:
        proc.kill()
        raise AssertionError(f"the server did not start: {line!r}")
    return proc, int(m.group(1))


def wait_for_line(proc: subprocess.Popen, needle: str, deadline_s: float = 300.0) -> list[str]:
    """stderr lines up to the first containing ``needle`` (a guard against a hang, not a speed test)."""
    assert proc.stderr is not None
    lines = []
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        line = proc.stderr.readline()
        if not line:
            raise AssertionError(f"the server ended before {needle!r}: {lines}")
        lines.append(line)
        if needle in line:
            return lines
    raise AssertionError(f"no {needle!r} in {lines}")
