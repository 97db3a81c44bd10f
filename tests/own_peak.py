"""Run a command so that its peak resident set is its own, and measure its CPU time.

On Linux a child's ``ru_maxrss`` starts from the resident set of the process it was forked
from (exec keeps the high-water mark of the image it replaces), so every child of a pytest
worker that has grown to 500 MiB reads 500 MiB. This launcher is small: the worker starts it,
it starts the command from its own small image, waits, and writes the command's own peak (KiB)
and its CPU seconds (user + system, of the command and every child it waited for; the
launcher's own start-up is not in them) to a file, one per line. CPU time, unlike wall-clock
time, does not grow with the other load on the machine. It exits as the command did (a signal
is passed on as the same signal).

    python tests/own_peak.py RESULT_FILE COMMAND [ARG...]
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

LAUNCHER = Path(__file__).resolve()


def wrapped(result_file: Path, argv: list[str]) -> list[str]:
    """The command line that runs ``argv`` through this launcher."""
    return [sys.executable, str(LAUNCHER), str(result_file), *argv]


def read_peak_kib(result_file: Path) -> int:
    return int(result_file.read_text(encoding="ascii").split()[0])


def read_cpu_s(result_file: Path) -> float:
    """The command's user + system CPU seconds."""
    return float(result_file.read_text(encoding="ascii").split()[1])


def kill_group(proc: subprocess.Popen) -> None:
    """Kill the launcher and the command (start the launcher with ``start_new_session=True``)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def main() -> None:
    result_file, argv = Path(sys.argv[1]), sys.argv[2:]
    child = subprocess.Popen(argv)
    for sig in (signal.SIGTERM, signal.SIGINT):  # passed on, so the command sees what the test sent
        signal.signal(sig, lambda s, _f: os.kill(child.pid, s))
    while True:
        try:
            _, status, usage = os.wait4(child.pid, 0)
            break
        except InterruptedError:
            continue
    result_file.write_text(f"{usage.ru_maxrss}\n{usage.ru_utime + usage.ru_stime:.6f}\n", encoding="ascii")
    code = os.waitstatus_to_exitcode(status)
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    sys.exit(code)


if __name__ == "__main__":
    main()
