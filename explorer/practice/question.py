"""A practice question, its answer formats and checking, and the session's score (no Streamlit here).

A question is generated from a seed (explorer.practice.generate): a small random scenario is
built and replayed with ``explorer.scenario.engine.replay``, and the question, its answer and the
explanation are read from the recorded data of one step. The same seed always gives the same
question, so a seed shown on screen reproduces it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from explorer.scenario.engine import replay
from explorer.scenario.spec import Scenario
from explorer.scenario.trace import Step, Trace

KINDS: tuple[str, ...] = (
    "hit_length",
    "next_evicted",
    "free_queue",
    "hashed_this_step",
    "admission",
    "mistake",
    "external_hit",
    "async_load_events",
    "eagle_hit",
    "hybrid_hit",
    "why_miss",
)

KIND_LABELS: dict[str, str] = {
    "hit_length": "Predict the hit length",
    "next_evicted": "Predict the next block evicted",
    "free_queue": "Predict the free queue after a free",
    "hashed_this_step": "Predict which blocks get hashed this step",
    "admission": "Predict whether admission succeeds",
    "mistake": "Spot the common mistake",
    "external_hit": "Predict the external hit after the local hit",
    "async_load_events": "Predict what an async load emits, and when",
    "eagle_hit": "Predict the hit with EAGLE on",
    "hybrid_hit": "Predict the reconciled hit of a hybrid model",
    "why_miss": "Why did this block miss?",
}

MAX_SEED = 999_999


# ---- questions and answers --------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    correct: bool
    given: Any  # the parsed answer, or None when it could not be read
    expected: Any
    message: str  # one line: right or wrong, and the true value


@dataclass(frozen=True)
class Question:
    kind: str
    seed: int
    title: str
    question: str  # what to predict (markdown)
    setup: tuple[str, ...]  # what happened before the asked step, one line per op
    state: tuple[str, ...]  # the state the asked step starts from
    asked: str  # the asked step itself (without its outcome)
    answer_format: str  # "int" | "ids" | "block" | "bool" | "reason"
    answer: Any
    explanation: tuple[str, ...]  # the reason, from the step's recorded data
    scenario: Scenario
    step_index: int  # index of the asked step in the scenario
    lesson: str | None = None  # the lesson that teaches this
    mistaken_answer: Any = None  # kind "mistake": what the mistake would answer
    mistake: str | None = None  # kind "mistake": the mistake, in words
    unit: str = "tokens"  # what an "int" answer counts, as the input's hint says it
    block: int | None = None  # kind "why_miss": the block of the asked lookup the question names

    @property
    def key(self) -> str:
        return f"{self.kind}:{self.seed}"

    @property
    def input_hint(self) -> str:
        return {
            "int": f"a number of {self.unit}, e.g. 32",
            "ids": "block ids in order, comma separated, e.g. 4, 5, 3 (a run as 5-9; empty: none)",
            "block": "a block id, or none",
            "bool": "yes or no",
            "reason": "a miss reason, e.g. evicted",
        }[self.answer_format]

    def check(self, raw: Any) -> Verdict:
        """Compare a user's answer (text, or a bool for yes/no questions) with the truth."""
        expected_text = format_answer(self.answer_format, self.answer)
        try:
            given = parse_answer(self.answer_format, raw)
        except ValueError as e:
            return Verdict(
                False, None, self.answer, f"Could not read that answer ({e}). The engine says: {expected_text}."
            )
        if given == self.answer:
            return Verdict(True, given, self.answer, f"Right: {expected_text}.")
        return Verdict(
            False,
            given,
            self.answer,
            f"Not quite: you said {format_answer(self.answer_format, given)}, the engine says {expected_text}.",
        )

    def asked_step(self, trace: Trace | None = None) -> Step:
        trace = trace or replay(self.scenario)
        return trace.steps[self.step_index]

    def asked_text(self) -> str:
        """What the engine did in the asked step, as the command line's text form says it."""
        from explorer.scenario.cli import describe_step

        trace = replay(self.scenario)
        after = trace.snapshot_at(self.step_index + 1)
        return describe_step(self.asked_step(trace), self.scenario.engine.block_size, after).strip()


def parse_answer(fmt: str, raw: Any) -> Any:
    """A typed answer from what the user entered; ValueError when it cannot be read."""
    if fmt == "bool":
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text in ("yes", "y", "true", "ok", "admitted", "succeeds"):
            return True
        if text in ("no", "n", "false", "refused", "fails", "none"):
            return False
        raise ValueError("answer yes or no")
    text = "" if raw is None else str(raw).strip()
    if fmt == "reason":  # a reason's name (design section 14) or its label
        from explorer.miss.sentence import REASON_LABELS

        key = re.sub(r"[\s-]+", "_", text.lower())
        by_label = {v.lower(): k for k, v in REASON_LABELS.items()}
        if key in REASON_LABELS and key != "hit":
            return key
        if text.lower() in by_label:
            return by_label[text.lower()]
        raise ValueError("expected a miss reason, e.g. evicted or never_cached")
    if fmt == "int":
        cleaned = text.replace(",", "").replace("_", "").replace(" ", "")
        if not re.fullmatch(r"[0-9]{1,12}", cleaned):
            raise ValueError("expected a whole number")
        return int(cleaned)
    if fmt == "block":
        text = re.sub(r"^block\s*", "", text, flags=re.IGNORECASE)
        if text.lower() in ("", "none", "no", "-", "nothing"):
            return None
        if not re.fullmatch(r"[0-9]{1,12}", text):
            raise ValueError("expected a block id or none")
        return int(text)
    if fmt == "ids":
        inner = re.sub(r"\(none\)", "", text, flags=re.IGNORECASE).strip("[]() ")
        if inner.lower() in ("", "none", "-", "nothing"):
            return []
        parts = [p for p in re.split(r"[\s,;]+", re.sub(r"\s*[-–]\s*", "-", inner)) if p]
        out: list[int] = []
        for p in parts:
            m = re.fullmatch(r"([0-9]{1,12})-([0-9]{1,12})", p)
            if m:  # a run, as the page shows long ones: 5-9 or 9-5
                a, b = int(m.group(1)), int(m.group(2))
                if abs(a - b) > 100_000:
                    raise ValueError("that run is too long")
                out.extend(range(a, b + 1) if a <= b else range(a, b - 1, -1))
            elif re.fullmatch(r"[0-9]{1,12}", p):
                out.append(int(p))
            else:
                raise ValueError("expected block ids separated by commas")
        return out
    raise ValueError(f"unknown answer format {fmt!r}")


def format_answer(fmt: str, value: Any) -> str:
    if fmt == "bool":
        return "yes" if value else "no"
    if fmt == "int":
        return f"{value:,} tokens" if isinstance(value, int) else str(value)
    if fmt == "block":
        return "none" if value is None else f"block {value}"
    if fmt == "ids":
        return "[" + ", ".join(str(v) for v in value) + "]" if value else "[] (none)"
    return str(value)


# ---- score (kept by the page in its session, never here) --------------------------------------


@dataclass
class Score:
    answered: int = 0
    correct: int = 0
    seen: set[str] = field(default_factory=set)  # question keys already scored

    def record(self, key: str, correct: bool) -> bool:
        """Count a first answer to a question; a repeated answer to the same one is not counted."""
        if key in self.seen:
            return False
        self.seen.add(key)
        self.answered += 1
        self.correct += int(correct)
        return True

    @property
    def text(self) -> str:
        return f"{self.correct} / {self.answered}"
