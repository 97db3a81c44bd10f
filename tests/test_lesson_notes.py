"""Every count a lesson note states in a recognised phrasing equals the replay's record.

A note is prose, so only a small set of phrasings is read: a hit ("Hit 64", "C hits 96", "the
hit is 80"), the blocks a request waiting for remote KV holds, an arrival's prompt length and
full blocks, popped and evicted blocks, events by type (and medium), an admission's sum, a
request's num_computed_tokens, the connector's stats and the CPU tier's evictions. Each phrasing
is compared with what the replay recorded for that step, so an edit of a lesson that makes a
note state another number fails here. Every phrasing is used by at least one note (a rule no
note matches checks nothing), and a note changed to a wrong number is caught.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from explorer.scenario.engine import replay
from explorer.scenario.parse import load_scenario
from explorer.scenario.records import AdmissionCheck, Freed, Lookup, Popped
from explorer.scenario.trace import Step, Trace
from tests.step_records import evictions

LESSONS = Path(__file__).resolve().parents[1] / "lessons"
TOMLS = sorted(LESSONS.glob("*.toml"))

# A count in digits (never a part of a longer number: "1,184" is not "1") or in a word.
N = r"(?:\d{1,3}(?:,\d{3})+|\d+)(?!\d|,\d{3})|no|one|two|three|four|five|six"
_WORDS = {"no": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6}


def _n(text: str) -> int:
    return _WORDS[text] if text in _WORDS else int(text.replace(",", ""))


@dataclass(frozen=True)
class At:
    """What a rule may read: the trace, the lesson step (1-based) and its record."""

    trace: Trace
    k: int

    @property
    def step(self) -> Step:
        return self.trace.steps[self.k - 1]

    @property
    def before(self) -> Any:
        return self.trace.snapshot_at(self.k - 1)

    @property
    def after(self) -> Any:
        return self.trace.snapshot_at(self.k)

    def request(self, rid: str) -> Any:
        view = self.after.request(rid)
        assert view is not None, f"{rid} is not live after step {self.k}"
        return view

    def hits(self) -> set[int]:
        """The lookup hits this step recorded (an admit's, an engine step's lookups)."""
        s = self.step
        out = {s.hit_tokens} if s.hit_tokens is not None else set()
        lk = s.last(Lookup)
        if lk is not None:
            out.add(lk.hit_tokens)
        out |= {r.num_local_tokens for r in s.engine_step.connector if r.kind == "lookup"} if s.engine_step else set()
        return out

    def events(self, kind: str, medium: str | None = None) -> list[Any]:
        return [e for e in self.step.events if type(e).__name__ == kind and (medium is None or e.medium == medium)]

    def stat_delta(self, key: str) -> int:
        return self.after.stats[key] - self.before.stats[key]


# A rule: (name, pattern, which ops it reads, check(match, at) -> list of (said, recorded)).
Check = Callable[[re.Match[str], At], list[tuple[Any, Any]]]


def _hit(m: re.Match[str], at: At) -> list[tuple[Any, Any]]:
    said = _n(m.group("n"))
    recorded = at.hits()
    return [(said, said if said in recorded else sorted(recorded))]


def _request_hit(m: re.Match[str], at: At) -> list[tuple[Any, Any]]:
    if m.group("who") not in {op.id for op in at.trace.scenario.ops}:
        return []  # "it hits", "attention alone hits": not a request's hit
    return _hit(m, at)


def _hit_blocks(m: re.Match[str], at: At) -> list[tuple[Any, Any]]:
    bs = at.trace.scenario.hash_block_size
    return [(_n(m.group("b")), _n(m.group("n")) // bs), *_hit(m, at)]


def _arrival_blocks(m: re.Match[str], at: At) -> list[tuple[Any, Any]]:
    req = at.request(at.step.op.id or "")
    out = [(_n(m.group("b")), len(req.block_hashes))]
    if m.group("t") is not None:
        out.append((_n(m.group("t")), req.num_prompt_tokens))
    return out


def _admission(m: re.Match[str], at: At) -> list[tuple[Any, Any]]:
    said = (_n(m.group("new")), _n(m.group("hit")), _n(m.group("free")), m.group("op") == "<=")
    assert _n(m.group("sum")) == said[0] + said[1], m.group(0)
    checks = [
        (c.num_new_blocks, c.num_evictable_hit_blocks, c.num_free_blocks, c.ok) for c in at.step.of(AdmissionCheck)
    ]
    return [(said, said if said in checks else checks)]


def _freed(m: re.Match[str], at: At) -> list[tuple[Any, Any]]:
    freed = at.step.of(Freed)
    held = sum(1 for f in freed if f.to == "held")
    return [
        (_n(m.group("all")), len(freed)),
        (_n(m.group("held")), held),
        (_n(m.group("queue")), len(freed) - held),
    ]


RULES: list[tuple[str, str, frozenset[str] | None, Check]] = [
    ("hit", rf"(?:^|[.:;] )[Hh]it (?P<n>{N})\b(?! =)", None, _hit),
    ("hit = blocks", rf"[Hh]it (?P<n>{N}) = (?P<b>{N}) blocks", None, _hit_blocks),
    ("the hit is", rf"\bthe (?:reconciled )?hit is (?P<n>{N})\b", None, _hit),
    ("both groups hit", rf"\b[Bb]oth groups hit (?P<n>{N})\b", None, _hit),
    ("local hit", rf"\b[Ll]ocal hit (?P<n>{N})\b", None, _hit),
    ("X hits N", rf"\b(?P<who>[A-Z][\w-]*) hits (?P<n>{N})\b(?! (?:full )?blocks)", None, _request_hit),
    (
        "waits for remote KV holding N blocks",
        rf"\b(?P<who>[A-Z]\w*) waits for remote KV holding (?P<n>{N}) blocks",
        frozenset({"step"}),
        lambda m, at: [(_n(m.group("n")), len(at.request(m.group("who")).block_ids))],
    ),
    (
        "waits for remote KV with N tokens",
        rf"\b(?P<who>[A-Z]\w*) waits for remote KV with (?P<n>{N}) tokens",
        frozenset({"step"}),
        lambda m, at: [(_n(m.group("n")), at.request(m.group("who")).num_computed_tokens)],
    ),
    (
        "arrival: N tokens, M full blocks",
        rf"(?:(?P<t>{N})(?:-token prompt| (?:prompt )?tokens)[:,] (?:exactly )?|hashes its )"
        rf"(?P<b>{N}) full blocks",
        frozenset({"arrive"}),
        _arrival_blocks,
    ),
    (
        "arrival: an N-token prompt",
        rf"\b(?P<t>{N})-token (?:prompt|request|document)\b",
        frozenset({"arrive"}),
        lambda m, at: [(_n(m.group("t")), at.request(at.step.op.id or "").num_prompt_tokens)],
    ),
    (
        "free blocks with no hash",
        rf"\b[Oo]nly (?P<n>{N}) free blocks have no hash",
        None,
        lambda m, at: [(_n(m.group("n")), sum(1 for b in at.before.free_queue if at.before.blocks[b][1] is None))],
    ),
    (
        "of the N free blocks",
        rf"\bof the (?P<n>{N}) free blocks",
        None,
        lambda m, at: [(_n(m.group("n")), at.before.num_free_blocks)],
    ),
    (
        "the free queue goes from N to M",
        rf"\bthe free queue goes from (?P<a>{N}) to (?P<b>{N})\b",
        None,
        lambda m, at: [
            (_n(m.group("a")), at.before.num_free_blocks),
            (_n(m.group("b")), at.after.num_free_blocks),
        ],
    ),
    (
        "popped blocks",
        rf"(?:\bpops (?P<a>{N}) blocks|\b(?P<b>{N}) (?:new )?blocks (?:are popped|come from the|from the head))",
        None,
        lambda m, at: [(_n(m.group("a") or m.group("b")), len(at.step.of(Popped)))],
    ),
    (
        "evicted cached blocks",
        rf"(?:\bevicts (?:[A-Z]\w*'s )?|\bthen )(?P<n>{N}) cached (?:blocks|ones)",
        None,
        lambda m, at: [(_n(m.group("n")), len(evictions(at.step)))],
    ),
    (
        "events of a kind",
        rf"\b(?P<n>{N}) (?P<kind>BlockStored|BlockRemoved|AllBlocksCleared)\b(?! per)"
        r"(?:(?:,| with) medium (?P<medium>CPU|GPU))?",
        None,
        lambda m, at: [(_n(m.group("n")), len(at.events(m.group("kind"), m.group("medium"))))],
    ),
    (
        "BlockStored with N hashes or tokens",
        rf"\bBlockStored(?:,| \() ?(?P<n>{N}) (?P<what>hashes|blocks|tokens)\b",
        None,
        lambda m, at: [
            (
                _n(m.group("n")),
                _n(m.group("n"))
                if _n(m.group("n"))
                in {
                    len(e.token_ids) if m.group("what") == "tokens" else len(e.block_hashes)
                    for e in at.events("BlockStored")
                }
                else [len(e.block_hashes) for e in at.events("BlockStored")],
            )
        ],
    ),
    (
        "admission sum",
        rf"(?P<new>{N})(?: new(?: blocks?)?)? \+ (?:its )?(?P<hit>{N})(?: [a-z ]+?)? = "
        rf"(?P<sum>{N}) (?P<op><=|>) (?P<free>{N})\b",
        None,
        _admission,
    ),
    (
        "num_computed_tokens",
        rf"\bnum_computed_tokens (?:becomes |back to |to )?(?P<n>{N})\b",
        None,
        lambda m, at: (
            [(_n(m.group("n")), at.request(at.step.op.id).num_computed_tokens)] if at.step.op.id is not None else []
        ),
    ),
    (
        "freed: held and to the queue",
        rf"\b(?P<all>{N}) blocks are freed \((?P<held>{N}) [^,()]*stay held, "
        rf"(?P<queue>{N}) go to the free queue\)",
        None,
        _freed,
    ),
    (
        "external stats of the step",
        rf"\b(?:External stats: queries (?P<q>{N})[^,]*, hits (?P<h>{N})"
        rf"|external queries \+= (?P<q2>{N})[^,]*, hits \+= (?P<h2>{N}))",
        None,
        lambda m, at: [
            (_n(m.group("q") or m.group("q2")), at.stat_delta("external_queries")),
            (_n(m.group("h") or m.group("h2")), at.stat_delta("external_hits")),
        ],
    ),
    (
        "preempted stats",
        rf"\b(?P<key>preempted_requests|preempted_queries|preempted_hits) (?P<n>{N})\b",
        None,
        lambda m, at: [(_n(m.group("n")), at.after.stats[m.group("key")])],
    ),
    (
        "CPU tier evictions",
        rf"\bevicts the (?P<n>{N}) least recently used",
        None,
        lambda m, at: [
            (
                _n(m.group("n")),
                sum(len(r.cpu_evicted) for r in at.step.engine_step.connector if r.kind == "cpu_store")
                if at.step.engine_step
                else None,
            )
        ],
    ),
]


def checked(note: str, at: At) -> Iterator[tuple[str, str, Any, Any]]:
    """(rule, phrase, said, recorded) for every recognised phrase of ``note`` at step ``at.k``."""
    for name, pattern, ops, check in RULES:
        if ops is not None and at.step.op.op not in ops:
            continue
        for m in re.finditer(pattern, note):
            for said, recorded in check(m, at):
                yield name, m.group(0), said, recorded


@cache
def _trace(path: Path) -> Trace:
    return replay(load_scenario(path))


def _notes() -> Iterator[tuple[Path, int, str]]:
    for path in TOMLS:
        for op in _trace(path).scenario.ops:
            if op.note:
                yield path, op.index + 1, op.note


@pytest.mark.parametrize("path", TOMLS, ids=lambda p: p.stem)
def test_every_count_a_note_states_is_the_recorded_one(path):
    trace = _trace(path)
    wrong = [
        f"step {op.index + 1} ({name}): {phrase!r} says {said}, the replay recorded {recorded}"
        for op in trace.scenario.ops
        if op.note
        for name, phrase, said, recorded in checked(op.note, At(trace, op.index + 1))
        if said != recorded
    ]
    assert not wrong, "\n".join(wrong)


def test_every_phrasing_checks_some_note():
    used = {name for path, k, note in _notes() for name, *_ in checked(note, At(_trace(path), k))}
    assert used == {name for name, *_ in RULES}


def test_lesson_19_step_8_says_the_blocks_b_holds_while_it_waits():
    path = LESSONS / "19_cpu_offloading.toml"
    trace, k = _trace(path), 8
    b = trace.snapshot_at(k).request("B")
    assert b is not None and b.status == "waiting_for_remote_kvs"
    # free queue 9 -> 3: the six blocks B holds, ids 1-6
    assert (trace.snapshot_at(k - 1).num_free_blocks, trace.snapshot_at(k).num_free_blocks) == (9, 3)
    assert b.block_ids == (1, 2, 3, 4, 5, 6)
    note = trace.scenario.ops[k - 1].note or ""
    said = re.search(r"B waits for remote KV holding (\d+) blocks", note)
    assert said is not None and int(said.group(1)) == len(b.block_ids)


@pytest.mark.parametrize(
    "stem,k,right,wrong",
    [
        ("19_cpu_offloading", 8, "holding 6 blocks", "holding 7 blocks"),
        ("19_cpu_offloading", 5, "(6 BlockRemoved)", "(5 BlockRemoved)"),
        ("14_engine_step", 12, "preempted_hits 64", "preempted_hits 48"),
        ("04_touch_then_allocate", 11, "2 + 4 = 6 > 5", "2 + 3 = 5 > 5"),
        ("03_lookup_cap", 5, "Hit 1,184", "Hit 1,200"),
        ("00_two_chat_turns", 17, "then 23 cached blocks", "then 24 cached blocks"),
    ],
)
def test_a_note_with_a_wrong_count_is_caught(stem, k, right, wrong):
    trace = _trace(LESSONS / f"{stem}.toml")
    note = trace.scenario.ops[k - 1].note or ""
    assert right in note
    at = At(trace, k)
    assert all(said == rec for *_, said, rec in checked(note, at))
    bad = [(phrase, said, rec) for _, phrase, said, rec in checked(note.replace(right, wrong), at) if said != rec]
    assert bad, f"{wrong!r} went unnoticed"
