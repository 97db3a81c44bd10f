"""Practice mode: questions that ask before they show (no Streamlit here).

A question is generated from a seed: a small random scenario is built (random block size, pool
size, prompt lengths and shared prefixes), replayed with ``explorer.trace.replay``, and the
question, its answer and the explanation are read from the recorded data of one step (its
lookup, admission sum, evicted, freed and cached blocks). The same seed always gives the same
question, so a seed shown on screen reproduces it.

Kinds of question:
- ``hit_length``: how many tokens does this admission hit?
- ``next_evicted``: which cached block does this admission evict first (or none)?
- ``free_queue``: the free queue after a request finishes, head first.
- ``hashed_this_step``: which blocks does the pool cache (hash) in this step?
- ``admission``: does allocate_slots admit this request?
- ``mistake``: a common interview mistake, shown by a scenario where it gives a wrong number.

Besides the generators: the interview walkthrough's follow-up questions, its scoring rubric and
common mistakes (in our words), and the "value of a hit" calculator's rows.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from explorer.scenario import Scenario, parse_scenario_dict
from explorer.trace import Snapshot, Step, Trace, replay

KINDS: tuple[str, ...] = ("hit_length", "next_evicted", "free_queue", "hashed_this_step", "admission", "mistake")

KIND_LABELS: dict[str, str] = {
    "hit_length": "Predict the hit length",
    "next_evicted": "Predict the next block evicted",
    "free_queue": "Predict the free queue after a free",
    "hashed_this_step": "Predict which blocks get hashed this step",
    "admission": "Predict whether admission succeeds",
    "mistake": "Spot the common mistake",
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
    answer_format: str  # "int" | "ids" | "block" | "bool"
    answer: Any
    explanation: tuple[str, ...]  # the reason, from the step's recorded data
    scenario: Scenario
    step_index: int  # index of the asked step in the scenario
    lesson: str | None = None  # the lesson that teaches this
    mistaken_answer: Any = None  # kind "mistake": what the mistake would answer
    mistake: str | None = None  # kind "mistake": the mistake, in words

    @property
    def key(self) -> str:
        return f"{self.kind}:{self.seed}"

    @property
    def input_hint(self) -> str:
        return {
            "int": "a number of tokens, e.g. 32",
            "ids": "block ids in order, comma separated, e.g. 4, 5, 3 (a run as 5-9; empty: none)",
            "block": "a block id, or none",
            "bool": "yes or no",
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
    if fmt == "int":
        cleaned = text.replace(",", "").replace("_", "").replace(" ", "")
        if not re.fullmatch(r"\d+", cleaned):
            raise ValueError("expected a whole number")
        return int(cleaned)
    if fmt == "block":
        text = re.sub(r"^block\s*", "", text, flags=re.IGNORECASE)
        if text.lower() in ("", "none", "no", "-", "nothing"):
            return None
        if not re.fullmatch(r"\d+", text):
            raise ValueError("expected a block id or none")
        return int(text)
    if fmt == "ids":
        inner = re.sub(r"\(none\)", "", text, flags=re.IGNORECASE).strip("[]() ")
        if inner.lower() in ("", "none", "-", "nothing"):
            return []
        parts = [p for p in re.split(r"[\s,;]+", re.sub(r"\s*[-–]\s*", "-", inner)) if p]
        out: list[int] = []
        for p in parts:
            m = re.fullmatch(r"(\d+)-(\d+)", p)
            if m:  # a run, as the page shows long ones: 5-9 or 9-5
                a, b = int(m.group(1)), int(m.group(2))
                if abs(a - b) > 100_000:
                    raise ValueError("that run is too long")
                out.extend(range(a, b + 1) if a <= b else range(a, b - 1, -1))
            elif re.fullmatch(r"\d+", p):
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


# ---- scenario building ------------------------------------------------------------------------


def _spec(tokens: Sequence[int]) -> str:
    """Token ids as a compact token spec: runs of consecutive ids become a:b."""
    parts: list[str] = []
    i = 0
    while i < len(tokens):
        j = i
        while j + 1 < len(tokens) and tokens[j + 1] == tokens[j] + 1:
            j += 1
        if j - i >= 2:
            parts.append(f"{tokens[i]}:{tokens[j] + 1}")
        else:
            parts.extend(str(t) for t in tokens[i : j + 1])
        i = j + 1
    return ", ".join(parts)


def _run(start: int, n: int) -> list[int]:
    return list(range(start, start + n))


class _Builder:
    """Steps of a practice scenario, with the tokens each request holds (for explanations)."""

    def __init__(self, block_size: int, num_blocks: int) -> None:
        self.bs = block_size
        self.nb = num_blocks
        self.steps: list[dict[str, Any]] = []
        self.tokens: dict[str, list[int]] = {}
        self.extra: dict[str, tuple] = {}

    def arrive(self, rid: str, tokens: list[int], **kw: Any) -> None:
        self.steps.append({"op": "arrive", "id": rid, "prompt": _spec(tokens), **kw})
        self.tokens[rid] = list(tokens)
        self.extra[rid] = (kw.get("lora"), kw.get("cache_salt"))

    def op(self, op: str, rid: str | None = None, **kw: Any) -> int:
        d: dict[str, Any] = {"op": op, **({"id": rid} if rid is not None else {}), **kw}
        if op in ("sample", "generate") and rid is not None:
            toks = kw["tokens"]
            self.tokens[rid].extend(toks)
            d["tokens"] = _spec(toks)
        self.steps.append(d)
        return len(self.steps) - 1

    def scenario(self, title: str, source: str) -> Scenario:
        return parse_scenario_dict(
            {"title": title, "engine": {"block_size": self.bs, "num_blocks": self.nb}, "steps": self.steps}, source
        )


def _describe_op(raw: Mapping[str, Any]) -> str:
    """A step as the learner sees it before it runs: the op and its inputs, no outcome."""
    op, rid = raw["op"], raw.get("id")
    if op == "arrive":
        extras = []
        if raw.get("lora"):
            extras.append(f"LoRA {raw['lora']!r}")
        if raw.get("cache_salt"):
            extras.append(f"cache_salt {raw['cache_salt']!r}")
        from explorer.tokens import spec_length

        n = spec_length(raw["prompt"])
        return f"{rid} arrives: prompt `{raw['prompt']}` ({n} tokens)" + (f", {', '.join(extras)}" if extras else "")
    if op == "admit":
        return f"the scheduler admits {rid}" + (
            f" for at most {raw['tokens']} tokens (a prefill chunk)" if "tokens" in raw else ""
        )
    if op == "generate":
        return f"{rid} generates `{raw['tokens']}` (each pending token is computed, then the next is sampled)"
    if op == "sample":
        return f"{rid} samples `{raw['tokens']}` (appended, not computed yet)"
    if op == "decode":
        return f"{rid} computes its pending token (decode)"
    if op == "finish":
        return f"{rid} finishes"
    if op == "preempt":
        return f"{rid} is preempted"
    if op == "reset":
        return "reset_prefix_cache()" + (" with running = true" if raw.get("running") else "")
    return op


def _setup_lines(trace: Trace, upto: int) -> tuple[str, ...]:
    """The ops before the asked one, each with its outcome (they already happened)."""
    from explorer.scenario_cli import describe_step

    bs = trace.scenario.engine.block_size
    return tuple(describe_step(s, bs).strip() for s in trace.steps[:upto])


def _queue_text(queue: Sequence[int], mark: Callable[[int], str], hashed: Callable[[int], bool]) -> str:
    """The free queue head first; runs of 4+ consecutive ids without a hash shortened to a–b."""
    parts: list[str] = []
    i = 0
    while i < len(queue):
        j = i
        while j + 1 < len(queue) and queue[j + 1] == queue[j] + 1 and not hashed(queue[j + 1]) and not hashed(queue[i]):
            j += 1
        if j - i >= 3:
            parts.append(f"{queue[i]}–{queue[j]}")
        else:
            parts.extend(mark(b) for b in queue[i : j + 1])
        i = j + 1
    return " ".join(parts)


def _state_lines(snap: Snapshot, bs: int) -> tuple[str, ...]:
    """The pool before the asked step: the free queue with hash marks, and the live requests."""

    def mark(b: int) -> str:
        return f"{b}#" if snap.blocks[b][1] is not None else str(b)

    fq = _queue_text(snap.free_queue, mark, lambda b: snap.blocks[b][1] is not None) or "(empty)"
    lines = [f"Free queue, head first ({snap.num_free_blocks} free; # = holds a hash): {fq}"]
    held = [i for i, (rc, _) in enumerate(snap.blocks) if i > 0 and rc > 0]
    if held:
        lines.append("Blocks in use (ref_cnt): " + ", ".join(f"{i} ({snap.blocks[i][0]})" for i in held))
    for r in snap.requests:
        lines.append(
            f"Request {r.request_id} ({r.status}): {r.num_tokens} tokens, {r.num_computed_tokens} computed, "
            f"blocks {list(r.block_ids)}"
        )
    lines.append(f"Block size {bs}.")
    return tuple(lines)


def _finish(
    kind: str,
    seed: int,
    b: _Builder,
    asked: int,
    title: str,
    question: str,
    fmt: str,
    answer_of: Callable[[Step], Any],
    explain: Callable[[Trace, Step], tuple[str, ...]],
    lesson: str | None,
    **extra: Any,
) -> Question:
    scenario = b.scenario(title, f"practice:{kind}:{seed}")
    trace = replay(scenario)
    step = trace.steps[asked]
    return Question(
        kind=kind,
        seed=seed,
        title=title,
        question=question,
        setup=_setup_lines(trace, asked),
        state=_state_lines(trace.snapshot_at(asked), b.bs),
        asked=_describe_op(scenario.raw_steps[asked]),
        answer_format=fmt,
        answer=answer_of(step),
        explanation=explain(trace, step),
        scenario=scenario,
        step_index=asked,
        lesson=lesson,
        **extra,
    )


def _ids(ids: Sequence[int]) -> str:
    return "[" + ", ".join(str(i) for i in ids) + "]"


# ---- hit length -------------------------------------------------------------------------------


def _miss_reason(b: _Builder, rid: str, other: str, m: int, computed_other: int) -> str:
    """Why block m of `rid` is not in the cache, compared with the request `other`."""
    bs = b.bs
    mine, theirs = b.tokens[rid], b.tokens[other]
    if b.extra[rid] != b.extra[other]:
        (l1, s1), (l2, s2) = b.extra[rid], b.extra[other]
        if l1 != l2:
            return (
                f"{rid}'s LoRA adapter ({l1 or 'none'}) differs from {other}'s ({l2 or 'none'}). The adapter is "
                f"an extra key of every block, so even block 0's hash differs."
            )
        return (
            f"{rid}'s cache_salt ({s1 or 'none'}) differs from {other}'s ({s2 or 'none'}). The salt is an extra "
            f"key of block 0, so block 0's hash differs, and every later hash contains it."
        )
    lo, hi = m * bs, (m + 1) * bs
    d = next((i for i in range(lo, min(hi, len(theirs))) if mine[i] != theirs[i]), None)
    if d is not None:
        return (
            f"token {d} differs ({mine[d]} here, {theirs[d]} in {other}), so block {m}'s hash differs; "
            f"every later block's too, because each hash contains its parent's."
        )
    if len(theirs) < hi:
        return (
            f"{other} has only {len(theirs)} tokens, so its block {m} was partial: only full blocks get "
            f"a hash, and a partial block is never cached."
        )
    if computed_other < hi:
        return (
            f"{other}'s block {m} was completed only by its last sampled token, which is never computed, "
            f"so the pool never cached it."
        )
    return "no block with that hash is cached any more (it was evicted)."


def _explain_hit(b: _Builder, rid: str, other: str, computed_other: Callable[[], int]):
    def explain(trace: Trace, step: Step) -> tuple[str, ...]:
        lk = step.lookup
        assert lk is not None
        bs = b.bs
        hits = [p for p in lk.probes if p[1]]
        n_hashes = len(trace.snapshot_at(step.index).request(rid).block_hashes)  # type: ignore[union-attr]
        out = [
            f"{rid} has {lk.num_tokens} tokens, so the lookup may probe at most "
            f"({lk.num_tokens} − 1) // {bs} = {lk.cap_blocks} blocks (the last token must be computed to give logits)."
        ]
        if hits:
            out.append(f"Blocks 0–{len(hits) - 1} are cached (block ids {_ids([p[2] for p in hits])}).")
        miss = next((p for p in lk.probes if not p[1]), None)
        if lk.cap_blocks == 0:
            out.append(f"With {lk.num_tokens} ≤ {bs} tokens the cap is 0 blocks: nothing can hit, whatever is cached.")
        elif miss is not None:
            out.append(
                f"Block {miss[0]} misses: "
                + _miss_reason(b, rid, other, miss[0], computed_other())
                + " The walk stops at the first miss."
            )
        elif len(hits) == lk.cap_blocks and lk.cap_blocks < n_hashes:
            out.append(f"The walk stops at the cap: block {lk.cap_blocks} is recomputed even though it may be cached.")
        elif len(hits) == n_hashes:
            out.append(f"{rid} has no further full block to look up (a partial block has no hash).")
        out.append(f"Hit = {len(hits)} blocks × {bs} = {lk.hit_tokens} tokens.")
        return tuple(out)

    return explain


def q_hit_length(seed: int) -> Question:
    rng = random.Random(f"hit_length:{seed}")
    bs = rng.choice([4, 8, 16])
    b = _Builder(bs, 64)
    variant = rng.choice(["shared", "shared", "identical", "partial", "extra", "short", "generated"])
    la = rng.randint(2 * bs, 6 * bs) if variant != "short" else rng.randint(1, bs - 1)
    if variant == "partial" and la % bs == 0:
        la += rng.randint(1, bs - 1)
    a = _run(100, la)
    b.arrive("A", a, **({"lora": "sql"} if variant == "extra" and rng.random() < 0.3 else {}))
    b.op("admit", "A")
    a_computed = la
    if variant == "generated":
        g = rng.randint(2, 2 * bs)
        b.op("generate", "A", tokens=_run(500, g))
        a_computed = la + g - 1  # the last sampled token stays pending
    if rng.random() < 0.6:
        b.op("finish", "A")
    a_all = b.tokens["A"]
    kw: dict[str, Any] = {}
    if variant == "shared":
        s = rng.randint(1, la)
        btoks = a_all[:s] + _run(2000, rng.randint(1, 3 * bs))
    elif variant == "identical":
        btoks = list(a_all)
    elif variant == "generated":
        btoks = list(a_all) + _run(2000, rng.randint(1, 2 * bs))
    elif variant == "extra":
        btoks = list(a_all) + _run(2000, rng.randint(1, bs))
        if b.extra["A"][0]:
            kw = rng.choice([{"lora": "sql"}, {}, {"lora": "chat"}])
        else:
            kw = rng.choice([{"lora": "sql"}, {"cache_salt": "tenant-2"}])
    else:  # partial, short
        btoks = list(a_all) + _run(2000, rng.randint(1, 2 * bs))
    b.arrive("B", btoks, **kw)
    asked = b.op("admit", "B")
    return _finish(
        "hit_length",
        seed,
        b,
        asked,
        "How many tokens does B hit?",
        "How many of **B**'s tokens does the prefix cache lookup hit (`hit_tokens`)?",
        "int",
        lambda s: s.hit_tokens,
        _explain_hit(b, "B", "A", lambda: a_computed),
        "03_lookup_cap",
    )


# ---- next evicted -----------------------------------------------------------------------------


def _history(rng: random.Random, b: _Builder, n_req: int, max_blocks: int, keep_last_running: bool) -> list[str]:
    """Requests one after another (some sharing an earlier prefix), each admitted and finished."""
    ids = []
    for i in range(n_req):
        rid = "ABCDEFG"[i]
        nblk = rng.randint(1, max_blocks)
        length = (nblk - 1) * b.bs + rng.randint(1, b.bs)
        if ids and rng.random() < 0.5:
            src = b.tokens[rng.choice(ids)]
            s = min(len(src), rng.randint(1, length))
            toks = src[:s] + _run(1000 * (i + 1), length - s)
        else:
            toks = _run(1000 * (i + 1), length)
        b.arrive(rid, toks)
        b.op("admit", rid)
        if rng.random() < 0.3:
            b.op("generate", rid, tokens=_run(700 + 50 * i, rng.randint(1, b.bs)))
        ids.append(rid)
        if not (keep_last_running and i == n_req - 1):
            b.op("finish", rid)
    return ids


def _explain_evicted(trace: Trace, step: Step) -> tuple[str, ...]:
    before = trace.snapshot_at(step.index)
    adm = step.admissions[0]
    hashed = {i for i, (_, h) in enumerate(before.blocks) if h is not None}
    out = []
    if step.touched:
        out.append(
            f"First, touch takes the hit blocks {_ids(step.touched)} out of the free queue "
            f"({len(step.touched_from_free)} of them were in it): a request never evicts its own hits."
        )
    out.append(
        f"Then {adm.new_blocks_needed} new blocks are popped from the head of the queue: "
        f"{_ids(step.new_block_ids or ())}."
    )
    pops = [
        f"{bid} ({'holds a hash: evicted' if bid in hashed else 'no hash: nothing to evict'})"
        for bid in step.new_block_ids or ()
    ]
    out.append("In pop order: " + ", ".join(pops) + ".")
    if step.evicted:
        n = len(step.evicted)
        out.append(
            f"So the first block evicted is {step.evicted[0][0]}; in all {n} block{'s' if n > 1 else ''} "
            f"lose{'' if n > 1 else 's'} {'their hashes' if n > 1 else 'its hash'} (one BlockRemoved each)."
        )
    else:
        out.append(
            "None of them held a hash, so nothing is evicted: blocks without a hash sit at the front and are used first."
        )
    return tuple(out)


def q_next_evicted(seed: int) -> Question:
    rng = random.Random(f"next_evicted:{seed}")
    want_eviction = rng.random() < 0.75
    for attempt in range(60):
        bs = rng.choice([4, 8])
        b = _Builder(bs, rng.randint(8, 13))
        ids = _history(rng, b, rng.randint(2, 4), 3, keep_last_running=rng.random() < 0.3)
        share = [r for r in ids if rng.random() < 0.4]
        need = rng.randint(1, b.nb - 2)
        length = (need - 1) * bs + rng.randint(1, bs)
        if share:
            src = b.tokens[share[0]]
            s = min(len(src), length - 1, rng.randint(bs, 3 * bs))
            toks = src[:s] + _run(9000, length - s)
        else:
            toks = _run(9000, length)
        b.arrive("P", toks)
        asked = b.op("admit", "P")
        q = _finish(
            "next_evicted",
            seed,
            b,
            asked,
            "Which block is evicted first?",
            "Which block loses its hash first when **P**'s new blocks are popped? "
            "Answer `none` if no cached block is evicted.",
            "block",
            lambda s: s.evicted[0][0] if s.evicted else None,
            _explain_evicted,
            "06_free_order_lru",
        )
        step = q.asked_step()
        if step.ok and (bool(step.evicted) == want_eviction or attempt >= 40):
            return q
    return q


# ---- free queue after a free ------------------------------------------------------------------


def _explain_free(trace: Trace, step: Step) -> tuple[str, ...]:
    before = trace.snapshot_at(step.index)
    rid = step.op.id
    req = before.request(rid)  # type: ignore[arg-type]
    assert req is not None
    out = [
        f"{rid} holds blocks {_ids(req.block_ids)} and frees them in reverse: {_ids([f.block_id for f in step.freed])}."
    ]
    for f in step.freed:
        if f.to == "held":
            out.append(
                f"Block {f.block_id}: ref_cnt drops to {f.ref_cnt}, another request still uses it, so it stays out of the queue."
            )
        elif f.to == "front":
            out.append(f"Block {f.block_id}: ref_cnt 0 and no hash, so it goes to the front (reused first).")
        else:
            out.append(f"Block {f.block_id}: ref_cnt 0 and it holds a hash, so it goes to the back and stays cached.")
    front = [f.block_id for f in step.freed if f.to == "front"]
    back = [f.block_id for f in step.freed if f.to == "back"]
    out.append(
        f"Queue before: {_ids(before.free_queue)}. The front blocks {_ids(front)} are put before the head "
        f"in that order, the back blocks {_ids(back)} after the tail in that order."
    )
    out.append(f"Queue after: {_ids(step.snapshot.free_queue)}.")
    return tuple(out)


def q_free_queue(seed: int) -> Question:
    rng = random.Random(f"free_queue:{seed}")
    bs = rng.choice([4, 4, 8])
    b = _Builder(bs, rng.randint(7, 10))
    _history(rng, b, rng.randint(0, 2), 2, keep_last_running=False)
    la = rng.randint(bs + 1, 3 * bs + bs // 2)
    a = _run(100, la)
    b.arrive("X", a)
    b.op("admit", "X")
    if rng.random() < 0.5:
        b.op("generate", "X", tokens=_run(600, rng.randint(1, bs + 2)))
    if rng.random() < 0.5:
        s = rng.randint(bs, la)
        b.arrive("Y", a[:s] + _run(3000, rng.randint(1, bs)))
        b.op("admit", "Y")
    asked = b.op("finish", "X")
    return _finish(
        "free_queue",
        seed,
        b,
        asked,
        "The free queue after X finishes",
        "What is the free queue after **X** finishes, head first?",
        "ids",
        lambda s: list(s.snapshot.free_queue),
        _explain_free,
        "06_free_order_lru",
    )


# ---- which blocks get hashed this step ----------------------------------------------------------


def _explain_cached(trace: Trace, step: Step) -> tuple[str, ...]:
    bs = trace.scenario.engine.block_size
    before = trace.snapshot_at(step.index)
    rid = step.op.id
    req_before = before.request(rid)  # type: ignore[arg-type]
    req_after = step.snapshot.request(rid)  # type: ignore[arg-type]
    assert req_before is not None and req_after is not None
    out = []
    if step.hit_tokens:
        out.append(
            f"The lookup hits {step.hit_tokens} tokens; hit blocks are already cached and are never hashed again."
        )
    if not step.admissions:
        out.append(
            "This op allocates nothing (it only samples), so the pool caches nothing; the request itself "
            "hashes any block a sampled token completes."
        )
    for i, a in enumerate(step.admissions):
        after = a.num_computed_tokens + a.num_new_tokens
        full = after // bs
        label = f"Allocation {i + 1}: " if len(step.admissions) > 1 else ""
        out.append(
            f"{label}{a.num_new_tokens} token(s) computed this step, {after} computed after it: "
            f"{after} // {bs} = {full} full block(s) are cached by the end of it."
        )
    if step.cached:
        out.append(
            "Newly cached: "
            + ", ".join(
                f"block {c.block_id} (index {c.index}"
                + (f", a duplicate of {_ids(c.duplicate_of)}" if c.duplicate_of else "")
                + ")"
                for c in step.cached
            )
            + "."
        )
    else:
        out.append("No block becomes full in this step, so nothing new is cached.")
    if step.op.op == "generate":
        out.append(
            f"The last sampled token stays pending: {req_after.num_tokens - req_after.num_computed_tokens} "
            f"token(s) known but not computed, so a block it completes is not cached yet."
        )
    out.append(
        "Caching happens when allocate_slots schedules the step, before the GPU computes it: BlockStored goes out first."
    )
    return tuple(out)


def q_hashed_this_step(seed: int) -> Question:
    rng = random.Random(f"hashed_this_step:{seed}")
    bs = rng.choice([4, 8])
    b = _Builder(bs, 40)
    variant = rng.choice(["chunk", "chunk_after_hit", "generate", "decode"])
    la = rng.randint(2 * bs, 5 * bs)
    if variant == "chunk_after_hit":
        base = _run(100, rng.randint(bs, 3 * bs))
        b.arrive("W", base)
        b.op("admit", "W")
        b.op("finish", "W")
        a = base + _run(300, la)
    else:
        a = _run(300, la)
    b.arrive("A", a)
    if variant in ("chunk", "chunk_after_hit"):
        if rng.random() < 0.5 and variant == "chunk":
            first = rng.randint(1, la - 2)
            b.op("admit", "A", tokens=first)
            remaining = la - first
        else:
            remaining = None
        chunk = rng.randint(1, max(1, (remaining or la) - 1))
        asked = b.op("admit", "A", tokens=chunk)
        title = "Which blocks get hashed by this chunk?"
    elif variant == "generate":
        b.op("admit", "A")
        asked = b.op("generate", "A", tokens=_run(700, rng.randint(2, 2 * bs + 1)))
        title = "Which blocks get hashed while A generates?"
    else:
        b.op("admit", "A")
        b.op("generate", "A", tokens=_run(700, rng.randint(1, 2 * bs)))
        asked = b.op("decode", "A")
        title = "Which blocks get hashed by this decode?"
    return _finish(
        "hashed_this_step",
        seed,
        b,
        asked,
        title,
        "Which block ids does the **pool** cache (give a hash and announce with BlockStored) in this step? "
        "Answer in the order they are cached; empty if none.",
        "ids",
        lambda s: [c.block_id for c in s.cached],
        _explain_cached,
        "05_when_hashed",
    )


# ---- admission --------------------------------------------------------------------------------


def _explain_admission(trace: Trace, step: Step) -> tuple[str, ...]:
    bs = trace.scenario.engine.block_size
    a = step.admissions[0]
    hits = step.lookup.hit_tokens if step.lookup else 0
    total_blocks = -(-a.slots_needed // bs)
    out = [
        f"The lookup hits {hits} tokens ({hits // bs} blocks); {a.free_hit_blocks} of those blocks sit in the "
        f"free queue with ref_cnt 0, and touching them takes them out of it."
    ]
    out.append(
        f"The request needs cdiv({a.slots_needed}, {bs}) = {total_blocks} blocks in all, "
        f"so {a.new_blocks_needed} new ones."
    )
    verdict = "≤" if a.ok else ">"
    out.append(
        f"Required = {a.new_blocks_needed} new + {a.free_hit_blocks} free hit = {a.required} {verdict} "
        f"{a.free_blocks} free blocks."
    )
    if a.ok:
        out.append("So allocate_slots admits it: it touches the hits, then pops the new blocks from the head.")
    else:
        out.append(
            "So allocate_slots returns None: nothing is touched or allocated, and the lookup is not counted "
            "in the stats. The request waits."
        )
        if a.new_blocks_needed <= a.free_blocks:
            out.append(
                f"Counting only the new blocks ({a.new_blocks_needed} ≤ {a.free_blocks}) would wrongly say yes: "
                f"the free hit blocks count too."
            )
    return tuple(out)


def q_admission(seed: int) -> Question:
    rng = random.Random(f"admission:{seed}")
    want_ok = rng.random() < 0.5
    for attempt in range(80):
        bs = rng.choice([4, 8])
        b = _Builder(bs, rng.randint(6, 10))
        la = rng.randint(2, 4) * bs
        a = _run(100, la)
        b.arrive("A", a)
        b.op("admit", "A")
        b.op("finish", "A")
        if rng.random() < 0.5:
            b.arrive("R", _run(5000, rng.randint(1, 3) * bs - rng.randint(0, bs - 1)))
            b.op("admit", "R")
        s = rng.randint(bs, la)
        length = s + rng.randint(1, 3 * bs)
        b.arrive("C", a[:s] + _run(2000, length - s))
        asked = b.op("admit", "C")
        q = _finish(
            "admission",
            seed,
            b,
            asked,
            "Is C admitted?",
            "Does allocate_slots admit **C**?",
            "bool",
            lambda s: s.ok,
            _explain_admission,
            "04_touch_then_allocate",
        )
        adm = q.asked_step().admissions[0]
        trap = adm.new_blocks_needed <= adm.free_blocks < adm.required
        if adm.ok == want_ok and (adm.ok or trap or attempt > 50):
            return q
    return q


# ---- the interview walkthrough's common mistakes ----------------------------------------------


@dataclass(frozen=True)
class Mistake:
    name: str
    statement: str  # the mistake, in our words
    correction: str  # what really happens
    lesson: str


MISTAKES: tuple[Mistake, ...] = (
    Mistake(
        "lora",
        "Forgetting the extra keys: expecting a request through a LoRA adapter to hit the blocks "
        "the base model cached for the same tokens.",
        "The adapter is an extra key of every block, so its hashes never match the base model's.",
        "02_extra_keys",
    ),
    Mistake(
        "freed_on_finish",
        "Saying a request's cached blocks are freed (forgotten) when it finishes.",
        "They go back to the free queue with their hashes and stay valid until allocation pops them.",
        "06_free_order_lru",
    ),
    Mistake(
        "partial_block",
        "Counting a partial last block as cached.",
        "Only full blocks get a hash; a partial block is never cached, so a hit never covers it.",
        "01_hash_chain",
    ),
    Mistake(
        "identical_100",
        "Benchmarking with identical prompts and expecting a 100% hit.",
        "The lookup stops at num_tokens − 1, and hits are whole blocks: the last block is always recomputed.",
        "03_lookup_cap",
    ),
)
MISTAKES_BY_NAME = {m.name: m for m in MISTAKES}


def q_mistake(seed: int, name: str | None = None) -> Question:
    rng = random.Random(f"mistake:{seed}")
    m = MISTAKES_BY_NAME[name] if name else rng.choice(MISTAKES)
    bs = rng.choice([4, 8, 16])
    b = _Builder(bs, 64)
    nblk = rng.randint(2, 5)
    if m.name == "partial_block":
        la = nblk * bs + rng.randint(1, bs - 1)
    else:
        la = nblk * bs
    a = _run(100, la)
    b.arrive("A", a)
    b.op("admit", "A")
    b.op("finish", "A")
    if m.name == "lora":
        b.arrive("B", a + _run(2000, rng.randint(1, bs)), lora="sql")
        mistaken = la
    elif m.name == "freed_on_finish":
        b.arrive("B", a + _run(2000, rng.randint(1, bs)))
        mistaken = 0
    elif m.name == "partial_block":
        b.arrive("B", a + _run(2000, rng.randint(1, 2 * bs)))
        mistaken = la
    else:
        b.arrive("B", list(a))
        mistaken = la
    asked = b.op("admit", "B")
    q = _finish(
        "mistake",
        seed,
        b,
        asked,
        "A common mistake",
        "How many tokens does **B** hit? (The common mistake above gives a different number.)",
        "int",
        lambda s: s.hit_tokens,
        _explain_hit(b, "B", "A", lambda: la),
        m.lesson,
        mistaken_answer=mistaken,
        mistake=m.statement,
    )
    return q


# ---- generation -------------------------------------------------------------------------------

GENERATORS: dict[str, Callable[[int], Question]] = {
    "hit_length": q_hit_length,
    "next_evicted": q_next_evicted,
    "free_queue": q_free_queue,
    "hashed_this_step": q_hashed_this_step,
    "admission": q_admission,
    "mistake": q_mistake,
}


def kind_for_seed(seed: int) -> str:
    return random.Random(f"kind:{seed}").choice(KINDS)


def generate(seed: int, kind: str | None = None) -> Question:
    """The question of this seed (and kind; without one the seed picks the kind)."""
    if not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        raise ValueError(f"seed must be an integer in [0, {MAX_SEED}]")
    kind = kind or kind_for_seed(seed)
    if kind not in GENERATORS:
        raise ValueError(f"unknown question kind {kind!r} (known: {', '.join(KINDS)})")
    return GENERATORS[kind](seed)


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


# ---- the interview walkthrough: follow-ups and rubric (in our words) --------------------------


@dataclass(frozen=True)
class FollowUp:
    question: str
    answer: str
    lesson: str | None


FOLLOW_UPS: tuple[FollowUp, ...] = (
    FollowUp(
        "Why chain each block's hash to its parent's instead of keying blocks by their token positions?",
        "A key of (position, tokens) would match the same 16 tokens at the same offset after a different "
        "prefix, but their KV depends on every earlier token, so that KV would be wrong. With the parent "
        "chain, a hit on block k implies blocks 0 to k all match. Lesson 1 changes only the first token and "
        "every block misses.",
        "01_hash_chain",
    ),
    FollowUp(
        "The pool is full of blocks that running requests use, and a new request needs space. What happens?",
        "Only blocks with ref_cnt 0 are in the free queue, and only those can be evicted; blocks in use never "
        "are. When the queue cannot supply the blocks, allocate_slots returns None and the scheduler preempts "
        "a running request instead (its blocks are freed and it is recomputed later). Lesson 7 runs out of "
        "blocks and preempts.",
        "07_eviction_preemption",
    ),
    FollowUp(
        "Now the model has sliding-window layers too. Does the hit change?",
        "Each KV cache group gets its own manager. A sliding-window manager only needs the blocks inside the "
        "window (and scans from the right for a long enough run), so a prefix can be a full hit for the "
        "full-attention layers and a partial one for the local layers; the coordinator uses the hit length "
        "that every group can serve. The explorer models a single full-attention group.",
        None,
    ),
)


@dataclass(frozen=True)
class RubricLevel:
    level: str
    summary: str


RUBRIC: tuple[RubricLevel, ...] = (
    RubricLevel(
        "Weak",
        "Talks about caching whole prompts keyed by their text, or says a request's blocks are "
        "evicted as soon as it finishes.",
    ),
    RubricLevel(
        "Hire",
        "Explains the chained block hashes, the walk to the longest cached prefix, reference "
        "counts and LRU eviction from the free queue, and computes a hit length in whole blocks.",
    ),
    RubricLevel(
        "Strong hire",
        "Also knows the num_tokens − 1 cap and why a fully cached prompt recomputes a "
        "whole block, names the extra keys and cache_salt, and explains why the fixed seed of sha256 "
        "matters for reuse across nodes.",
    ),
)


# ---- the value of a hit ------------------------------------------------------------------------


@dataclass(frozen=True)
class HitValueRow:
    label: str
    dense_only: str  # the walkthrough's estimate
    with_attention: str | None  # plus the attention term, when a model shape is given


def hit_value_rows(
    params: float, peak_flops: float, utilization: float, prompt_tokens: int, hit_tokens: int, attention=None
) -> list[HitValueRow]:
    """The walkthrough's table for these inputs, beside the same with the attention term.

    ``attention`` is a model shape (explorer.prefill.configs.ModelConfig) or None.
    """
    from explorer.prefill.estimate import estimate_prefill

    dense = estimate_prefill(params, prompt_tokens, hit_tokens, peak_flops, utilization)
    att = (
        estimate_prefill(params, prompt_tokens, hit_tokens, peak_flops, utilization, attention=attention)
        if attention
        else None
    )

    def both(f: Callable[[Any], str]) -> tuple[str, str | None]:
        return f(dense), (f(att) if att else None)

    rows = [
        ("prefill per prompt token (dense term)", lambda e: f"{e.per_token_s * 1e6:.1f} µs"),
        (f"{prompt_tokens:,}-token prompt, no cache", lambda e: f"{e.full_s * 1e3:.1f} ms"),
        (f"with a {hit_tokens:,}-token hit", lambda e: f"{e.cached_s * 1e3:.1f} ms"),
        ("saved", lambda e: f"{e.saved_s * 1e3:.1f} ms"),
        ("share of the prefill saved", lambda e: f"{e.saved_fraction:.0%}"),
    ]
    return [HitValueRow(label, *both(f)) for label, f in rows]


def max_hit_for(prompt_tokens: int, block_size: int = 16) -> int:
    """The largest hit a prompt can get: whole blocks, capped at num_tokens − 1."""
    return ((prompt_tokens - 1) // block_size) * block_size


_MEASUREMENT_KEYS = {"prompt_tokens", "hit_tokens", "full_ms", "cached_ms"}


def load_measurements(docs_dir: Path) -> list[dict[str, Any]]:
    """Prefill measurements checked in under docs/ (JSON files holding the `prefill --json` records:
    one object, a list of them, or an object with a list under any key). Malformed files are skipped."""
    found: list[dict[str, Any]] = []
    if not docs_dir.is_dir():
        return found
    for path in sorted(docs_dir.rglob("*.json")):
        try:
            if path.stat().st_size > 2_000_000:
                continue
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        stack = [data]
        while stack:
            item = stack.pop(0)
            if isinstance(item, dict):
                if set(item) >= _MEASUREMENT_KEYS:
                    found.append({**item, "source": path.name})
                else:
                    stack.extend(v for v in item.values() if isinstance(v, (list, dict)))
            elif isinstance(item, list):
                stack.extend(item)
    return found
