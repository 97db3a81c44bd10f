"""The Trace replay page's job in a browser session: it waits its turn among the server's heavy
actions (`explorer.ui.heavy`), then runs in a worker process (`explorer.ui.replay_worker`).

A run first takes a ticket in the server's one queue; when its turn comes the worker starts by
itself (in the thread that ended the turn before), so a session that is on another page, or a
background tab that polls seldom, does not hold the others up. The worker's end, however it ends
(a result, an error, Cancel, a closed tab), gives the turn back; a waiter whose tab closes
leaves the queue. Everything lives in st.session_state under keys starting with ``replay_``.
"""

from __future__ import annotations

import queue as queue_mod
import threading
import time
from typing import Any

import streamlit as st

from explorer.ui.heavy import server_turns
from explorer.ui.replay_worker import session_alive, start_worker, stop_worker, this_session

JOB = "replay_job"  # the running worker: {"proc", "queue", ..., "ticket", "frac", "text", "started"}
WAIT = "replay_wait"  # the run waiting for its turn (a _Waiting)
RESULT = "replay_result"
ERROR = "replay_error"
NOTICE = "replay_notice"
WHAT = "trace replay"  # as the waiting note names it


def _state() -> Any:
    return st.session_state


class _Waiting:
    """A run waiting for its turn; ``start`` (the turn's ``on_turn``) starts its worker, unless
    it was cancelled first."""

    def __init__(self, job: dict[str, Any]) -> None:
        self.job = job
        self.session_id = this_session()
        self.lock = threading.Lock()
        self.ticket: int | None = None
        self.worker: dict[str, Any] | None = None
        self.error: str | None = None
        self.cancelled = False

    def enqueue(self) -> None:
        """Take a ticket at the queue's tail (on a free server the worker starts in this call)."""
        ticket = server_turns().take(alive=session_alive(self.session_id), on_turn=self.start)
        with self.lock:
            self.ticket = ticket

    def start(self, ticket: int) -> None:
        turns = server_turns()
        with self.lock:
            self.ticket = ticket
            if self.cancelled:
                turns.release(ticket)
                return
            try:
                self.worker = start_worker(self.job, self.session_id, on_end=lambda: turns.release(ticket))
            except OSError as e:
                self.error = f"the replay worker did not start: {e}"
                turns.release(ticket)

    def cancel(self) -> None:
        with self.lock:
            self.cancelled = True
            worker, ticket = self.worker, self.ticket
        if worker is not None:
            stop_worker(worker, terminate=True)
        if ticket is not None:
            server_turns().release(ticket)


def running() -> bool:
    """Whether this session has a run waiting or running."""
    return _state().get(JOB) is not None or _state().get(WAIT) is not None


def queue_job(job: dict[str, Any]) -> None:
    """Queue ``job`` for this session; it starts when its turn comes (at once on a free server)."""
    for key in (RESULT, ERROR, NOTICE):
        _state().pop(key, None)
    waiting = _Waiting(job)
    _state()[WAIT] = waiting
    waiting.enqueue()
    advance()


def advance() -> int:
    """Move a waiting run on: how many others go first (0 once its turn has come, or none waits)."""
    waiting: _Waiting | None = _state().get(WAIT)
    if waiting is None:
        return 0
    with waiting.lock:
        worker, err = waiting.worker, waiting.error
    if err is not None:
        _state().pop(WAIT)
        _state()[ERROR] = err
        return 0
    if worker is not None:
        _state().pop(WAIT)
        _state()[JOB] = {
            **worker,
            "ticket": waiting.ticket,
            "frac": 0.0,
            "text": "starting the worker",
            "started": time.time(),
        }
        return 0
    if waiting.cancelled:  # cancelled from another script run of this session
        _state().pop(WAIT)
        return 0
    assert waiting.ticket is not None
    n = server_turns().position(waiting.ticket)
    if n is None:  # dropped while this session was gone: back in the queue, at its tail
        waiting.enqueue()
        n = server_turns().position(waiting.ticket)
    return n or 0  # 0: the turn has come and the worker is starting


def stop_job(terminate: bool) -> str:
    """Forget the job (terminating its worker when asked) and give its turn back; the tail of
    its stderr."""
    waiting: _Waiting | None = _state().pop(WAIT, None)
    if waiting is not None:
        waiting.cancel()
    job = _state().pop(JOB, None)
    if job is None:
        return ""
    try:
        return stop_worker(job, terminate)
    finally:
        server_turns().release(job["ticket"])


def poll_job() -> bool:
    """Drain the worker's messages; True when the job ended (result, error or death)."""
    job = _state().get(JOB)
    if job is None:
        return True
    q: queue_mod.Queue = job["queue"]
    while True:
        try:
            msg = q.get_nowait()
        except queue_mod.Empty:
            return False
        if msg is None:  # the worker's output ended without a result
            code = job["proc"].poll()
            tail = stop_job(terminate=True)
            last = tail.splitlines()[-1] if tail else ""
            _state()[ERROR] = f"the replay worker stopped unexpectedly (exit code {code}). {last}".strip()
            return True
        if "progress" in msg:
            job["frac"], job["text"] = float(msg["progress"]), str(msg.get("text", ""))
        elif "result" in msg:
            _state()[RESULT] = msg["result"]
            stop_job(terminate=False)
            return True
        elif "error" in msg:
            _state()[ERROR] = str(msg["error"])
            stop_job(terminate=False)
            return True


def cancel() -> None:
    stop_job(terminate=True)
    _state()[NOTICE] = "Replay cancelled."
