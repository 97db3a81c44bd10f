"""The replay page's worker process: one sweep job per browser session, in a fresh interpreter
(``python -m explorer.traffic.worker``: one JSON job on stdin, JSON lines back).

Not a multiprocessing spawn: spawn re-runs the parent's ``__main__``, which under Streamlit is
the app script itself. A thread per job reads the worker's lines into a queue (the page polls
it); a second one watches the browser session and terminates (then kills) the worker once the
session has been gone ABANDON_S, whether or not the worker still prints (a hung one does not).
When the server ends, every live worker is terminated at exit, and a worker whose server died
without exiting (SIGKILL) ends itself (`explorer.traffic.worker` watches its parent).
"""

from __future__ import annotations

import atexit
import json
import os
import queue as queue_mod
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from streamlit.runtime.scriptrunner import get_script_run_ctx

from explorer.ui.timings import abandon_s

# a job whose browser session has been gone this long is terminated (30 s unless EXPLORER_ABANDON_S says)
ABANDON_S = abandon_s()
WATCH_S = 1.0  # how often the watchdog looks at the session
KILL_AFTER_S = 3.0  # a worker that ignores SIGTERM (or is stopped) this long is killed

_live: set[subprocess.Popen] = set()  # the workers not yet ended, for the exit handler
_live_lock = threading.Lock()


def _session_active(session_id: str | None) -> bool:
    if session_id is None:
        return True
    try:
        from streamlit.runtime import Runtime

        return not Runtime.exists() or Runtime.instance().is_active_session(session_id)
    except Exception:  # an internal API: never let it kill a job
        return True


def _end(proc: subprocess.Popen) -> None:
    """Terminate the worker; kill it if it is still there KILL_AFTER_S later; reap it."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=KILL_AFTER_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    with _live_lock:
        _live.discard(proc)


def _end_all() -> None:
    """At the server's exit (Ctrl-C, SIGTERM): no worker outlives it."""
    with _live_lock:
        procs = list(_live)
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    for proc in procs:
        _end(proc)


atexit.register(_end_all)


def this_session() -> str | None:
    """The browser session of the script run calling (None outside one)."""
    ctx = get_script_run_ctx()
    return ctx.session_id if ctx is not None else None


def session_alive(session_id: str | None) -> Callable[[], bool]:
    """A check that says False once browser session ``session_id`` has gone (its tab closed)."""
    return lambda: _session_active(session_id)


def _watch(proc: subprocess.Popen, session_id: str | None, on_end: Callable[[], None]) -> None:
    """The job's watchdog thread: ends the worker once its browser session has been gone
    ABANDON_S (its output, or lack of it, does not matter); ``on_end()`` once the worker has
    ended, however it ended."""
    gone_since: float | None = None
    try:
        while proc.poll() is None:
            time.sleep(WATCH_S)
            if _session_active(session_id):
                gone_since = None
            elif gone_since is None:
                gone_since = time.monotonic()
            elif time.monotonic() - gone_since > ABANDON_S:
                _end(proc)
                return
        with _live_lock:
            _live.discard(proc)
    finally:
        on_end()


def _pump(proc: subprocess.Popen, payload: bytes, q: queue_mod.Queue) -> None:
    """The job's reader thread: send the job, then queue every line the worker prints."""
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
        proc.stdout.close()
    finally:
        q.put(None)  # end of the worker's output


def start_worker(
    job: dict[str, Any], session_id: str | None, on_end: Callable[[], None] = lambda: None
) -> dict[str, Any]:
    """Start a worker on ``job`` for browser session ``session_id`` (``this_session()``), and its
    reader thread: {"proc", "queue", "thread", "stderr"}. ``on_end()`` runs once the worker has
    ended (the page gives back its turn there, whether or not the page still watches)."""
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
    with _live_lock:
        _live.add(proc)
    q: queue_mod.Queue = queue_mod.Queue()
    thread = threading.Thread(
        target=_pump, args=(proc, json.dumps(job).encode(), q), daemon=True, name="trace-replay-reader"
    )
    thread.start()
    threading.Thread(target=_watch, args=(proc, session_id, on_end), daemon=True, name="trace-replay-watchdog").start()
    return {"proc": proc, "queue": q, "thread": thread, "stderr": err}


def stop_worker(job: dict[str, Any], terminate: bool) -> str:
    """Wait for the job's worker to end (terminating it first when asked); the tail of its
    stderr."""
    proc: subprocess.Popen = job["proc"]
    if terminate:
        _end(proc)
    try:
        proc.wait(timeout=KILL_AFTER_S)
    except subprocess.TimeoutExpired:
        _end(proc)
    with _live_lock:
        _live.discard(proc)
    job["thread"].join(timeout=3)
    err = job["stderr"]
    try:
        err.seek(0)
        tail = err.read()[-400:].decode("utf-8", "replace").strip()
    finally:
        err.close()
    return tail
