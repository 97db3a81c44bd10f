"""Running `python -m explorer` as a child with bounded memory, and checking its one-line errors.

The child gets ``RLIMIT_AS`` (address space) set before it starts, so a command that tried to
read or build something unbounded fails inside the limit instead of taking the machine; the
test then sees that its line is not the expected one. The wait is a guard against a hang (a
FIFO read, an endless loop), not a measure of speed: it is far above what any case takes.
Speed is measured as the child's CPU seconds (user + system), which the other load on a
shared machine does not inflate as it does wall-clock time.
"""

from __future__ import annotations

import os
import re
import resource
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tests.own_peak import kill_group, read_cpu_s, read_peak_kib, wrapped

ROOT = Path(__file__).resolve().parents[2]
MEMORY_LIMIT = 512 << 20  # bytes of address space for each child
HANG_GUARD_S = 120.0


@dataclass
class Result:
    rc: int
    stdout: bytes
    stderr: bytes
    peak_kib: int  # the child's peak resident memory
    cpu_s: float  # the child's user + system CPU seconds, Python's start-up and imports included

    @property
    def err_text(self) -> str:
        return self.stderr.decode("utf-8", "backslashreplace")


def run_cli(*args: str, memory: int = MEMORY_LIMIT, env: dict[str, str] | None = None) -> Result:
    """Run the command line with ``args`` (str arguments with lone surrogates reach the child as
    the undecodable bytes they stand for); stdin is empty."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

    child_env = {**os.environ, "PYTHONPATH": str(ROOT), "MALLOC_ARENA_MAX": "2", **(env or {})}
    with tempfile.TemporaryDirectory() as d, tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        peak_file = Path(d) / "peak"
        proc = subprocess.Popen(
            wrapped(peak_file, [sys.executable, "-m", "explorer", *args]),
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            env=child_env,
            preexec_fn=limit,
            start_new_session=True,
        )
        try:
            proc.wait(timeout=HANG_GUARD_S)
        except subprocess.TimeoutExpired:
            kill_group(proc)
            proc.wait()
            raise AssertionError(f"explorer {' '.join(map(ascii, args))} hung") from None
        out.seek(0)
        err.seek(0)
        return Result(proc.returncode, out.read(), err.read(), read_peak_kib(peak_file), read_cpu_s(peak_file))


def assert_one_line_error(result: Result, pattern: str) -> str:
    """Exit 2, nothing on stdout, one line on stderr that says ``error: ...`` and matches
    ``pattern`` (a regular expression), no traceback. Returns the line."""
    text = result.err_text
    assert "Traceback" not in text, text[-3000:]
    assert result.rc == 2, (result.rc, text[-2000:])
    assert result.stdout == b"", result.stdout[:500]
    lines = text.splitlines()
    assert len(lines) == 1 and text.endswith("\n"), text[-2000:]
    line = lines[0]
    assert line.startswith("error: "), line
    assert re.search(pattern, line), f"{line!r} does not match {pattern!r}"
    return line
