"""Scenario building for practice questions: the steps of a small random scenario, and the
question read from its replay (setup lines, the state before the asked step, the asked op)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from explorer.practice.question import Question
from explorer.scenario.cli import describe_step
from explorer.scenario.engine import replay
from explorer.scenario.parse import parse_scenario_dict
from explorer.scenario.spec import Scenario
from explorer.scenario.trace import Snapshot, Step, Trace

# What a question says after the answer: the lines of its explanation, from the replay.
Explain = Callable[[Trace, Step], tuple[str, ...]]


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


def token_run(start: int, n: int) -> list[int]:
    """n consecutive token ids from start."""
    return list(range(start, start + n))


class ScenarioBuilder:
    """Steps of a practice scenario, with the tokens each request holds (for explanations)."""

    def __init__(self, block_size: int, num_blocks: int, engine: dict[str, Any] | None = None) -> None:
        self.bs = block_size
        self.nb = num_blocks
        self.engine = dict(engine or {})  # more engine keys (e.g. `speculative`)
        self.steps: list[dict[str, Any]] = []
        self.tokens: dict[str, list[int]] = {}
        self.extra: dict[str, tuple] = {}
        self.prompts: dict[int, list[int]] = {}  # step index of an arrive -> its prompt
        self._seen: list[dict[str, list[int]]] = []  # before each step: every sequence seen so far

    def arrive(self, rid: str, tokens: list[int], **kw: Any) -> None:
        self._seen.append({r: list(t) for r, t in self.tokens.items()})
        self.prompts[len(self.steps)] = list(tokens)
        self.steps.append({"op": "arrive", "id": rid, "prompt": _spec(tokens), **kw})
        self.tokens[rid] = list(tokens)
        self.extra[rid] = (kw.get("lora"), kw.get("cache_salt"))

    def sequences_before(self, index: int) -> dict[str, list[int]]:
        """Every request's tokens (prompt and outputs) as they were before step ``index``."""
        return self._seen[index]

    def op(self, op: str, rid: str | None = None, **kw: Any) -> int:
        self._seen.append({r: list(t) for r, t in self.tokens.items()})
        d: dict[str, Any] = {"op": op, **({"id": rid} if rid is not None else {}), **kw}
        if op in ("sample", "generate") and rid is not None:
            toks = kw["tokens"]
            self.tokens[rid].extend(toks)
            d["tokens"] = _spec(toks)
        self.steps.append(d)
        return len(self.steps) - 1

    def scenario(self, title: str, source: str) -> Scenario:
        return parse_scenario_dict(
            {
                "title": title,
                "engine": {"block_size": self.bs, "num_blocks": self.nb, **self.engine},
                "steps": self.steps,
            },
            source,
        )


def _relation(rid: str, tokens: Sequence[int], earlier: Mapping[str, Sequence[int]]) -> str:
    """How a prompt relates to the requests before it: "B = A's first 23 tokens + 6 new"."""
    best, best_n = None, 0
    for other, toks in earlier.items():
        n = 0
        for a, b in zip(tokens, toks):
            if a != b:
                break
            n += 1
        if n > best_n:
            best, best_n = other, n
    if best is None:
        return f"{rid} shares no leading token with an earlier request"
    new = len(tokens) - best_n
    whole = best_n == len(earlier[best])
    head = f"{best}'s whole {best_n}-token sequence" if whole else f"{best}'s first {best_n} tokens"
    return f"{rid} = {head}" + (f" + {new} new" if new else " exactly")


def _arrival_facts(raw: Mapping[str, Any], index: int, b: ScenarioBuilder) -> str:
    """What an arriving prompt shares with the requests before it, and its extra keys."""
    rid = str(raw["id"])
    earlier = {(f"the earlier {r}" if r == rid else r): t for r, t in b.sequences_before(index).items()}
    relation = _relation(rid, b.prompts[index], earlier) if earlier else f"{rid} is the first request"
    extras = [f"LoRA {raw['lora']!r}"] if raw.get("lora") else []
    if raw.get("cache_salt"):
        extras.append(f"cache_salt {raw['cache_salt']!r}")
    return f"{relation}; extra keys: {', '.join(extras) if extras else 'none (no LoRA, cache_salt or image)'}"


def _describe_op(raw: Mapping[str, Any], index: int, b: ScenarioBuilder, before: Snapshot) -> str:
    """A step as the learner sees it before it runs: the op and every input the answer needs
    (how the prompt relates to earlier ones, its extra keys), no outcome."""
    op, rid = raw["op"], raw.get("id")
    if op == "arrive":
        tokens = b.prompts[index]
        return f"{rid} arrives: prompt `{raw['prompt']}` ({len(tokens)} tokens; {_arrival_facts(raw, index, b)})"
    if op == "admit":
        req = before.request(rid or "")
        if req is not None and req.num_computed_tokens > 0:
            return (
                f"continue {rid}: its next prefill chunk"
                + (f" of at most {raw['tokens']} tokens" if "tokens" in raw else "")
                + f" ({req.num_computed_tokens} of {req.num_tokens} tokens computed; a later chunk does no lookup)"
            )
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


def _setup_lines(trace: Trace, upto: int, b: ScenarioBuilder) -> tuple[str, ...]:
    """The ops before the asked one, each with its outcome (they already happened); an arrival
    also says how its prompt relates to the requests before it, and its extra keys."""
    bs = trace.scenario.engine.block_size
    lines = []
    for k, step in enumerate(trace.steps[:upto]):
        line = describe_step(step, bs, trace.snapshot_at(k + 1)).strip()
        if step.op.op == "arrive":
            line += f" ({_arrival_facts(trace.scenario.raw_steps[k], k, b)})"
        lines.append(line)
    return tuple(lines)


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
    lines.append(
        f"Pool: {len(snap.blocks)} blocks (block 0 is the null block, so {len(snap.blocks) - 1} usable), block size {bs}."
    )
    return tuple(lines)


def finish_question(
    kind: str,
    seed: int,
    b: ScenarioBuilder,
    asked: int,
    title: str,
    question: str,
    fmt: str,
    answer_of: Callable[[Trace, Step], Any],
    explain: Explain,
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
        setup=_setup_lines(trace, asked, b),
        state=_state_lines(trace.snapshot_at(asked), b.bs),
        asked=_describe_op(scenario.raw_steps[asked], asked, b, trace.snapshot_at(asked)),
        answer_format=fmt,
        answer=answer_of(trace, step),
        explanation=explain(trace, step),
        scenario=scenario,
        step_index=asked,
        lesson=lesson,
        **extra,
    )


def snapshot_after(trace: Trace, step: Step) -> Snapshot:
    """The pool after a step of a practice replay (a recorded one)."""
    return trace.snapshot_at(step.index + 1)


def ids_text(ids: Sequence[int]) -> str:
    return "[" + ", ".join(str(i) for i in ids) + "]"
