"""A browser session's memory budget: what a replay will hold, estimated before it runs, and the
session's cache of replays kept within the budget (no Streamlit here).

A recorded replay used to keep a snapshot after every step: each block's (ref_cnt, hash), the
free queue, the hash map and every live request's block table and block hashes. It now keeps
a bounded number of checkpoints instead (explorer/scenario/checkpoints.py), so it holds less;
the estimate counts the pool once per checkpoint and per state held beside them, and still
counts every step's live requests' blocks and hashes as if snapshotted (an upper bound), plus
the tokens. `estimate_replay_bytes` walks the scenario's ops once (no
engine, no hashing) and adds those up with per-item costs measured on CPython 3.11 and rounded
up (tests/ui/test_budget.py checks the estimate stays above what tracemalloc measures).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import gc
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from explorer.errors import BadInput
from explorer.scenario.checkpoints import spacing_for
from explorer.scenario.ops import Arrival, Arrive, EngineArrive, Generate, Op, Sample
from explorer.scenario.spec import Scenario
from explorer.ui.timings import trim_after_s

SESSION_BUDGET = 384 << 20  # bytes of scenarios and replays one browser session may hold

# Bytes per item, measured and rounded up (see the module docstring).
PER_BLOCK_SNAPSHOT = 300  # one block in one snapshot: its (ref_cnt, hash), free-queue and hash-map entries
PER_REQUEST_BLOCK_SNAPSHOT = 24  # one block id and one block hash of a live request in one snapshot
PER_REQUEST_SNAPSHOT = 400  # a live request's view in one snapshot
PER_STEP = 4_000  # a step's records (panels, events) beside its snapshot
PER_TOKEN = 120  # a token: its id in the scenario, in events, in the request and its hashes
POOLS_BESIDE_CHECKPOINTS = 5  # the initial and final states, the cursor's engine and its two states
# A character of a request's labels (its id, LoRA name and path, cache salt, image ids) as the
# pages draw it: the text, its escaped HTML, the message to the browser; per block it labels,
# per step the request is live. And the longest label the web app takes at all: a page draws a
# label beside every block it covers, so one 200,000-character image id alone would cost
# hundreds of MiB however few the blocks.
PER_LABEL_CHAR = 16
MAX_LABEL_CHARS = 4096


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _labels(op: Op) -> list[tuple[str, str]]:
    """(what, text) of the strings an op carries that the pages draw."""
    out = [("request id", op.id or ""), ("note", op.note or "")]
    if isinstance(op, Arrive):
        out += [("text", op.text or "")] + [("image id", m.id) for m in op.mm]
    if isinstance(op, Arrival):
        if op.lora is not None:
            out += [("LoRA name", op.lora.name), ("LoRA path", op.lora.path)]
        out += [("cache salt", op.cache_salt or "")]
    return out


def check_labels(scenario: Scenario, limit: int = MAX_LABEL_CHARS) -> None:
    """BadInput naming the first label over ``limit`` characters."""
    for op in scenario.ops:
        for what, text in _labels(op):
            if len(text) > limit and what not in ("note", "text"):
                raise BadInput(
                    f"{scenario.source}: {op.label}: its {what} has {len(text):,} characters, more than the "
                    f"{limit:,} the web app draws: use a shorter {what}"
                )


def estimate_replay_bytes(scenario: Scenario) -> int:
    """An upper estimate of the memory a recorded replay of ``scenario`` holds and its pages draw."""
    eng = scenario.engine
    bs = max(1, eng.block_size)
    if scenario.groups is not None:  # hashes at the hash block size, one block table per group
        bs = scenario.hash_block_size
    per_block = PER_REQUEST_BLOCK_SNAPSHOT * (1 if scenario.groups is None else 1 + len(scenario.groups.groups))
    live: dict[str, int] = {}  # request id -> tokens
    live_blocks = 0  # sum over live requests of their blocks (= hashes at most)
    tokens = 0
    request_cost = 0
    label_chars: dict[str, int] = {}  # request id -> the characters its pages draw per step
    label_total = 0
    text_chars = 0
    for op in scenario.ops:
        text_chars += len(op.note or "") + (len(op.text or "") if isinstance(op, Arrive) else 0)
        if isinstance(op, Arrival):
            # An engine-step arrival is held with all the tokens it will sample (`output`).
            n = len(op.prompt) + (len(op.output) if isinstance(op, EngineArrive) else 0)
            tokens += n
            live_blocks -= _cdiv(live.get(op.id, 0), bs)
            live[op.id] = n
            live_blocks += _cdiv(n, bs)
            # The extra keys (image ids, LoRA, salt) label each block; the id, the request.
            keys = sum(len(t) for what, t in _labels(op) if what not in ("note", "text", "request id"))
            label_total -= label_chars.get(op.id, 0)
            label_chars[op.id] = keys * (_cdiv(n, bs) + 1) + len(op.id)
            label_total += label_chars[op.id]
        elif isinstance(op, (Sample, Generate)) and op.id in live:
            old = live[op.id]
            live[op.id] = old + len(op.tokens)
            tokens += len(op.tokens)
            live_blocks += _cdiv(live[op.id], bs) - _cdiv(old, bs)
        elif op.op in ("finish", "abort") and op.id in live:
            live_blocks -= _cdiv(live.pop(op.id), bs)
            label_total -= label_chars.pop(op.id, 0)
        request_cost += live_blocks * per_block + len(live) * PER_REQUEST_SNAPSHOT
        request_cost += label_total * PER_LABEL_CHAR
    steps = len(scenario.ops)
    # The pool is held whole by each checkpoint, the initial and final states, and once the
    # states are read back the cursor's engine and its last two states.
    pools = min(steps + 1, steps // spacing_for(steps) + POOLS_BESIDE_CHECKPOINTS)
    pool = pools * eng.num_blocks * PER_BLOCK_SNAPSHOT
    return pool + request_cost + steps * PER_STEP + tokens * PER_TOKEN + text_chars * PER_LABEL_CHAR


def check_budget(scenario: Scenario, budget: int = SESSION_BUDGET) -> int:
    """The estimate, or BadInput when one replay alone would exceed the session's budget (or a
    label is longer than the web app draws)."""
    check_labels(scenario)
    need = estimate_replay_bytes(scenario)
    if need > budget:
        raise BadInput(
            f"{scenario.source}: replaying {len(scenario.ops):,} steps over {scenario.engine.num_blocks:,} blocks "
            f"would hold about {need / 2**20:,.0f} MiB, more than one session's budget of {budget / 2**20:,.0f} MiB: "
            "use fewer blocks, fewer steps or shorter prompts"
        )
    return need


@dataclass
class _Entry:
    value: Any
    cost: int


class ReplayCache:
    """A session's parsed scenarios and replays, least recently used first out, within ``budget``
    bytes (each entry's cost is given when it is made: an estimate, not a measurement)."""

    def __init__(self, budget: int = SESSION_BUDGET) -> None:
        self.budget = budget
        self._entries: OrderedDict[str, _Entry] = OrderedDict()

    @property
    def used(self) -> int:
        return sum(e.cost for e in self._entries.values())

    def __len__(self) -> int:
        return len(self._entries)

    def peek(self, key: str) -> Any:
        """The cached value of ``key`` (now the most recently used), or None."""
        hit = self._entries.get(key)
        if hit is None:
            return None
        self._entries.move_to_end(key)
        return hit.value

    def get(self, key: str, make: Callable[[], Any], cost: int | Callable[[Any], int]) -> Any:
        """The cached value of ``key``, or ``make()`` kept for next time. ``cost``: the entry's
        bytes, known before (an int: older entries leave first, so the session never holds more
        than the budget while it is made) or from the value (a function of it)."""
        hit = self._entries.get(key)
        if hit is not None:
            self._entries.move_to_end(key)
            return hit.value
        if isinstance(cost, int):
            self._make_room(cost)
        value = make()
        n = cost if isinstance(cost, int) else cost(value)
        self._make_room(n)
        self._entries[key] = _Entry(value, n)
        return value

    def _make_room(self, cost: int) -> None:
        while self._entries and self.used + cost > self.budget:
            self._entries.popitem(last=False)

    def clear(self) -> None:
        self._entries.clear()


# Seconds after a session's release at which its memory is handed back again: a script run of
# the ended session may still be finishing (Streamlit stops a run only at its next call into
# Streamlit), and the replay it was building is freed only when that run ends. 2, 10 and 30 s
# unless EXPLORER_TRIM_AFTER_S says otherwise (explorer/ui/timings.py).
TRIM_AGAIN_AFTER_S = trim_after_s()


def release_cache(cache: ReplayCache) -> None:
    """A session ended: drop its replays and hand the freed memory back to the system.

    Python's own small-object allocator keeps an arena while any object in it lives, so a
    replay's million small tuples leave the server's resident size high after they are freed;
    the app is meant to run with ``PYTHONMALLOC=malloc`` (``make run`` does), where they come
    from the C allocator, and glibc's ``malloc_trim`` returns the freed pages. It runs now and
    again a few times later, for what the session's last script run frees when it ends."""
    cache.clear()
    # Streamlit's collection after every run is off (.streamlit/config.toml): collect what only
    # cycles kept alive, once here and not in each later trim, since a collection holds the
    # interpreter while every other session waits (short since explorer/ui/collector.py).
    gc.collect()
    trim_heap()
    for delay in TRIM_AGAIN_AFTER_S:
        timer = threading.Timer(delay, trim_heap)
        timer.daemon = True
        timer.start()


def trim_heap() -> bool:
    """Give the C heap's free pages back to the system (glibc's ``malloc_trim``, which runs
    without holding the interpreter); False where there is no glibc."""
    name = ctypes.util.find_library("c")
    if not name:
        return False
    with contextlib.suppress(OSError, AttributeError):  # not glibc: nothing to trim
        ctypes.CDLL(name).malloc_trim(0)
        return True
    return False
