"""The replay page's worker process: one sweep job per browser session, in a fresh interpreter
(``python -m explorer.traffic.worker``: one JSON job on stdin, JSON lines back).

Not a multiprocessing spawn: spawn re-runs the parent's ``__main__``, which under Streamlit is
the app script itself. A thread per job reads the worker's lines into a queue (the page polls
it), and terminates a worker whose browser session has gone away.
"""

from __future__ import annotations

import json
import os
import queue as queue_mod
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from streamlit.runtime.scriptrunner import get_script_run_ctx

ABANDON_S = 30.0  # a job whose browser session has been gone this long is terminated


def _session_active(session_id: str | None) -> bool:
    if session_id is None:
        return True
    try:
        from streamlit.runtime import Runtime

        return not Runtime.exists() or Runtime.instance().is_active_session(session_id)
    except Exception:  # an internal API: never let it kill a job
        return True


def _pump(proc: subprocess.Popen, payload: bytes, q: queue_mod.Queue, session_id: str | None) -> None:
    """The job's reader thread: send the job, then queue every line the worker prints.
    Terminates the worker when its browser session has been gone for ABANDON_S."""
    gone_since: float | None = None
    try:
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(payload)
            proc.stdin.close()
        except OSError:  # the worker died or was cancelled
            pass
        for raw in proc.stdout:
            try:
                msg = json.loads(raw)
            except ValueError:
                continue
            if isinstance(msg, dict):
                q.put(msg)
            if _session_active(session_id):
                gone_since = None
            elif gone_since is None:
                gone_since = time.monotonic()
            elif time.monotonic() - gone_since > ABANDON_S and proc.poll() is None:
                proc.terminate()
        proc.stdout.close()
    finally:
        q.put(None)  # end of the worker's output


def start_worker(job: dict[str, Any]) -> dict[str, Any]:
    """Start a worker on ``job`` and its reader thread: {"proc", "queue", "thread", "stderr"}.
    Call it from the page's script thread (it reads the browser session's id)."""
    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    err = tempfile.TemporaryFile()  # noqa: SIM115 (lives as long as the child process)
    proc = subprocess.Popen(
        [sys.executable, "-m", "explorer.traffic.worker"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=err,
        env=env,
        cwd=root,
    )
    q: queue_mod.Queue = queue_mod.Queue()
    ctx = get_script_run_ctx()
    session_id = ctx.session_id if ctx is not None else None
    thread = threading.Thread(
        target=_pump, args=(proc, json.dumps(job).encode(), q, session_id), daemon=True, name="trace-replay-reader"
    )
    thread.start()
    return {"proc": proc, "queue": q, "thread": thread, "stderr": err}


def stop_worker(job: dict[str, Any], terminate: bool) -> str:
    """Wait for the job's worker to end (terminating it first when asked); the tail of its
    stderr."""
    proc: subprocess.Popen = job["proc"]
    if terminate and proc.poll() is None:
        proc.terminate()
    try:
        proc.wait(timeout=3)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=3)
    job["thread"].join(timeout=3)
    err = job["stderr"]
    try:
        err.seek(0)
        tail = err.read()[-400:].decode("utf-8", "replace").strip()
    finally:
        err.close()
    return tail
