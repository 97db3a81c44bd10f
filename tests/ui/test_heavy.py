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
