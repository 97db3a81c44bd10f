"""Heavy actions take turns: first come first served, one at a time, each waiter told how many go
first, and a waiter that gives up leaves the queue (real threads, no Streamlit)."""

from __future__ import annotations

import threading
import time

import pytest

from explorer.ui.heavy import Turns


def _start(turns: Turns, name: str, order: list[str], seen: dict, release: threading.Event) -> threading.Thread:
    def work() -> None:
        with turns.turn(lambda n: seen.setdefault(name, []).append(n), poll_s=0.01):
            order.append(name)
            release.wait(10)

    t = threading.Thread(target=work, name=name)
    t.start()
    return t


def _until(cond, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_one_at_a_time_in_arrival_order_and_each_waiter_counts_those_ahead():
    turns, order, seen = Turns(), [], {}
    gates = {n: threading.Event() for n in "ABC"}
    a = _start(turns, "A", order, seen, gates["A"])
    _until(lambda: order == ["A"])
    b = _start(turns, "B", order, seen, gates["B"])
    _until(lambda: seen.get("B"))
    c = _start(turns, "C", order, seen, gates["C"])
    _until(lambda: seen.get("C"))
    assert seen["B"][-1] == 1 and seen["C"][-1] == 2  # A runs; C also waits for B
    assert "A" not in seen  # the first caller never waited
    gates["A"].set()
    _until(lambda: order == ["A", "B"])
    _until(lambda: seen["C"][-1] == 1)
    gates["B"].set()
    gates["C"].set()
    for t in (a, b, c):
        t.join(10)
    assert order == ["A", "B", "C"]


def test_a_waiter_that_stops_leaves_the_queue():
    turns, order, seen = Turns(), [], {}
    hold = threading.Event()
    a = _start(turns, "A", order, seen, hold)
    _until(lambda: order == ["A"])

    class Stopped(Exception):
        pass

    def give_up(n: int) -> None:
        raise Stopped  # as Streamlit stops a session's script mid-wait

    with pytest.raises(Stopped), turns.turn(give_up, poll_s=0.01):
        pass
    done = threading.Event()
    done.set()
    b = _start(turns, "B", order, seen, done)
    _until(lambda: seen.get("B"))
    assert seen["B"][-1] == 1  # only A is ahead: the one that gave up is gone
    hold.set()
    _until(lambda: order == ["A", "B"])
    a.join(10)
    b.join(1)


def _in_thread(fn, name: str) -> None:
    t = threading.Thread(target=fn, name=name)
    t.start()
    t.join(10)
    assert not t.is_alive()


def test_a_ticket_that_starts_by_itself_starts_when_the_turn_before_ends():
    turns = Turns()
    started: list[tuple[str, int, str]] = []

    def on_turn(name: str):
        return lambda ticket: started.append((name, ticket, threading.current_thread().name))

    a = turns.take(on_turn=on_turn("A"))  # a free server: A starts in take's own thread
    assert started == [("A", a, threading.current_thread().name)] and turns.position(a) == 0
    b = turns.take(on_turn=on_turn("B"))
    order, seen, gate = [], {}, threading.Event()
    c = _start(turns, "C", order, seen, gate)  # a blocking waiter behind B
    _until(lambda: seen.get("C"))
    assert turns.position(b) == 1 and seen["C"][-1] == 2 and len(started) == 1
    _in_thread(lambda: turns.release(a), "ender-of-A")  # A's worker ends in some other thread
    assert started[1] == ("B", b, "ender-of-A") and turns.position(b) == 0
    assert turns.position(a) is None
    turns.release(a)  # a second release of A's ticket does not end B's turn
    assert turns.position(b) == 0
    _until(lambda: seen["C"][-1] == 1)
    assert order == []
    turns.release(b)
    _until(lambda: order == ["C"])
    gate.set()
    c.join(10)
    assert turns.take(on_turn=on_turn("D")) == started[-1][1]  # free again: D starts at once


def test_a_waiter_whose_session_has_gone_leaves_the_queue_and_a_failed_start_ends_its_turn():
    turns = Turns()
    a = turns.take(on_turn=lambda t: None)
    here = {"B": True}
    b = turns.take(alive=lambda: here["B"], on_turn=lambda t: pytest.fail("B's tab has closed"))

    def broken(ticket: int) -> None:
        raise OSError("no worker")

    c = turns.take(on_turn=broken)
    order, seen, gate = [], {}, threading.Event()
    gate.set()
    d = _start(turns, "D", order, seen, gate)
    _until(lambda: seen.get("D"))
    assert (turns.position(b), turns.position(c), seen["D"][-1]) == (1, 2, 3)
    here["B"] = False  # B's browser session goes away while it waits
    assert turns.position(b) is None and turns.position(c) == 1
    _until(lambda: seen["D"][-1] == 2)
    _in_thread(lambda: turns.release(a), "ender-of-A")  # C's start fails: its turn ends, D runs
    _until(lambda: order == ["D"])
    d.join(10)
    assert turns.position(c) is None
    e = turns.take()
    assert turns.try_start(e) == 0  # nothing left holding the turn
