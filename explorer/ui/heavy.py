"""Heavy actions take turns across sessions: one prefill measurement or fleet run at a time.

On a class server thirty students share two cores. A measurement or a fleet run takes seconds of
CPU; thirty at once would take minutes each and stall every other student's steps. So they queue,
first come first served, and a waiting student sees "waiting for N others" instead of a page
that looks hung. The queue is one per server process (``st.cache_resource``); ``Turns`` itself
is plain threading, tested without Streamlit.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import streamlit as st

from explorer.numbers import counted


class Turns:
    """A first-come-first-served queue of callers; one holds the turn at a time."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._tickets = itertools.count()
        self._queue: list[int] = []  # tickets in arrival order; the head holds the turn once it starts
        self._running: int | None = None

    def ahead(self, ticket: int) -> int:
        """How many callers go before ``ticket``: the one running plus those queued earlier."""
        with self._cv:
            return self._queue.index(ticket) + (self._running is not None)

    @contextmanager
    def turn(self, on_wait: Callable[[int], None] = lambda n: None, poll_s: float = 0.5) -> Iterator[None]:
        """Hold the turn inside the block; before it, ``on_wait(N others ahead)`` at least every
        ``poll_s`` (an exception there, a session that stops, leaves the queue)."""
        with self._cv:
            ticket = next(self._tickets)
            self._queue.append(ticket)
        try:
            while True:
                with self._cv:
                    if self._running is None and self._queue[0] == ticket:
                        self._queue.pop(0)
                        self._running = ticket
                        break
                    n = self._queue.index(ticket) + (self._running is not None)
                on_wait(n)  # outside the lock: it may draw, or raise when the session stops
                with self._cv:
                    if self._running is not None or self._queue[0] != ticket:
                        self._cv.wait(poll_s)
        except BaseException:
            with self._cv:
                if ticket in self._queue:
                    self._queue.remove(ticket)
                self._cv.notify_all()
            raise
        try:
            yield
        finally:
            with self._cv:
                self._running = None
                self._cv.notify_all()


@st.cache_resource(show_spinner=False)
def _server_turns() -> Turns:
    return Turns()


@contextmanager
def heavy_turn(what: str) -> Iterator[None]:
    """Wait for this server's turn for ``what``, saying how many others go first."""
    note = st.empty()

    def waiting(n: int) -> None:
        note.info(
            f"Waiting for {counted(n, 'other')} to finish: one {what} runs at a time on this "
            "server, so a class does not stall itself.",
            icon=":material/hourglass_top:",
        )

    try:
        with _server_turns().turn(waiting):
            note.empty()
            yield
    finally:
        note.empty()
