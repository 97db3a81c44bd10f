"""`python -m explorer ARGS` run inside the test process: the same exit code, stdout and stderr as
the process gives, without starting a Python and importing the explorer for each call.

For tests of what a command prints and returns. Tests of the process itself (memory limits,
signals, servers, a pipe closed early, `-m explorer` wiring) start a real process instead.
An exception that escapes ``main`` is what the process would print as a traceback with exit 1:
so it is, here too, and the tests' "one line, exit 2, no Traceback" checks hold as before.
"""

from __future__ import annotations

import contextlib
import io
import subprocess
import traceback
from pathlib import Path

from explorer.cli import main

REPO = Path(__file__).resolve().parent.parent


def run_explorer(*argv: str, cwd: str | Path = REPO) -> subprocess.CompletedProcess[str]:
    """Run the explorer's command line with `argv` in `cwd`; the result as subprocess.run's."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.chdir(cwd), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main([str(a) for a in argv])
        except SystemExit as e:  # argparse's usage errors (exit 2) and --help (exit 0)
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            if isinstance(e.code, str):
                err.write(e.code + "\n")
        except Exception:  # what the interpreter prints for an uncaught exception, and its exit 1
            err.write(traceback.format_exc())
            code = 1
    return subprocess.CompletedProcess(["explorer", *argv], code, out.getvalue(), err.getvalue())
