"""Heavy actions take turns across sessions: one prefill measurement, fleet run or trace replay
at a time.

On a class server thirty students share two cores. A measurement, a fleet run or a replay takes
seconds to minutes of CPU; thirty at once would take minutes each and stall every other
student's steps. So they queue, first come first served, and a waiting student sees "waiting for
N others" instead of a page that looks hung. The queue is one per server process
(``st.cache_resource``), shared by every heavy action; ``Turns`` itself is plain threading,
tested without Streamlit.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import streamlit as st

from explorer.numbers import counted


class Turns:
    """A first-come-first-served queue of callers; one holds the turn at a time.

    Two ways to wait: ``turn()`` blocks its thread until the turn comes (a script run that holds
    it for seconds), and ``take(on_turn=...)`` never blocks: the turn starts by itself when it
    comes, ``on_turn(ticket)`` called in the thread that ended the turn before (or in ``take``'s, when
    the queue is free), and is held until ``release`` (a page that polls a worker process across
    script runs, and may be on another page when its turn comes). A ticket taken with ``alive``
    leaves the queue once ``alive()`` says False while it waits (its browser session has gone),
    so a closed tab never blocks the others."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._tickets = itertools.count()
        self._queue: list[int] = []  # tickets in arrival order; the head holds the turn once it starts
        self._alive: dict[int, Callable[[], bool]] = {}  # the waiting tickets that can go away
        self._on_turn: dict[int, Callable[[int], None]] = {}  # the waiting tickets that start by themselves
        self._running: int | None = None

    def _drop(self, ticket: int) -> None:
        self._queue.remove(ticket)
        self._alive.pop(ticket, None)
        self._on_turn.pop(ticket, None)
        self._cv.notify_all()

    def _start_head(self) -> int:
        """The queue's head takes the turn (under the lock, with the turn free); its ticket."""
        ticket = self._queue.pop(0)
        self._alive.pop(ticket, None)
        self._running = ticket
        return ticket

    def _prune(self) -> None:
        """Drop waiting tickets whose ``alive()`` says False (under the lock)."""
        for t in [t for t in self._queue if t in self._alive and not self._alive[t]()]:
            self._drop(t)

    def _hand_over(self) -> None:
        """While the turn is free and the head starts by itself, start it (outside the lock); an
        exception from its ``on_turn`` ends that turn (``on_turn`` reports its own errors)."""
        while True:
            with self._cv:
                self._prune()
                if self._running is not None or not self._queue or self._queue[0] not in self._on_turn:
                    return
                start = self._on_turn.pop(self._queue[0])
                ticket = self._start_head()
            try:
                start(ticket)
                return
            except Exception:  # another session's start, run in this thread: it must not end this one
                logging.getLogger("explorer.ui").exception("a queued heavy action failed to start")
                with self._cv:
                    if self._running == ticket:
                        self._running = None
                    self._cv.notify_all()

    def position(self, ticket: int) -> int | None:
        """0 while ``ticket`` holds the turn, N while N others go first, None once it is neither
        (released, or dropped when its ``alive()`` said False)."""
        with self._cv:
            if self._running == ticket:
                return 0
            self._prune()
            if ticket not in self._queue:
                return None
            return self._queue.index(ticket) + (self._running is not None)

    def take(self, alive: Callable[[], bool] | None = None, on_turn: Callable[[int], None] | None = None) -> int:
        """Join the queue's tail; the ticket to release (and try) with. With ``on_turn`` the turn
        starts by itself, ``on_turn(ticket)`` (this call makes it when the queue is free)."""
        with self._cv:
            ticket = next(self._tickets)
            self._queue.append(ticket)
            if alive is not None:
                self._alive[ticket] = alive
            if on_turn is not None:
                self._on_turn[ticket] = on_turn
        if on_turn is not None:
            self._hand_over()
        return ticket

    def try_start(self, ticket: int) -> int | None:
        """Start ``ticket``'s turn if it is its turn; then ``position(ticket)``."""
        with self._cv:
            self._prune()
            if self._running is None and self._queue and self._queue[0] == ticket:
                self._start_head()
        return self.position(ticket)

    def release(self, ticket: int) -> None:
        """Leave the queue, or end the turn ``ticket`` holds; a second release does nothing."""
        with self._cv:
            if self._running == ticket:
                self._running = None
                self._cv.notify_all()
            elif ticket in self._queue:
                self._drop(ticket)
        self._hand_over()

    @contextmanager
    def turn(self, on_wait: Callable[[int], None] = lambda n: None, poll_s: float = 0.5) -> Iterator[None]:
        """Hold the turn inside the block; before it, ``on_wait(N others ahead)`` at least every
        ``poll_s`` (an exception there, a session that stops, leaves the queue)."""
        ticket = self.take()
        try:
            while (n := self.try_start(ticket)) != 0:
                assert n is not None, "only this caller releases its ticket"
                on_wait(n)  # outside the lock: it may draw, or raise when the session stops
                with self._cv:
                    if self._running is not None or self._queue[0] != ticket:
                        self._cv.wait(poll_s)
            yield
        finally:
            self.release(ticket)


@st.cache_resource(show_spinner=False)
def server_turns() -> Turns:
    """This server's one queue of heavy actions."""
    return Turns()


def waiting_text(n: int, what: str) -> str:
    """What a waiting student reads (the same words on every page)."""
    return (
        f"Waiting for {counted(n, 'other')} to finish: one heavy action (here a {what}) runs at "
        "a time on this server, so a class does not stall itself."
    )


WAIT_ICON = ":material/hourglass_top:"


@contextmanager
def heavy_turn(what: str) -> Iterator[None]:
    """Wait for this server's turn for ``what``, saying how many others go first."""
    note = st.empty()

    def waiting(n: int) -> None:
        note.info(waiting_text(n, what), icon=WAIT_ICON)

    try:
        with server_turns().turn(waiting):
            note.empty()
            yield
    finally:
        note.empty()
