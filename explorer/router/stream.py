"""The request stream every policy of a run serves: chat sessions over shared system prompts,
or the first requests of a Mooncake trace (expanded as `explorer.traffic` expands them), and
the router's tokenizer."""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, replace
from typing import Any

from explorer.errors import BadInput
from explorer.router.config import LIMITS, FleetConfig, Limits, SystemPrompt, WorkloadSpec

VOCAB_SIZE = 49152  # SmolLM2's vocabulary: random chat tokens are drawn below it
MAX_STREAM_TOKENS = 8_000_000  # prompt tokens of a whole stream


@dataclass(frozen=True, slots=True)
class StreamRequest:
    index: int
    arrival_ms: float
    tokens: tuple[int, ...]
    output: tuple[int, ...]  # the tokens the instance will generate
    duration_ms: float  # len(output) x decode_ms: the chat stream times the next turn with it
    tenant: int
    session: int  # -1 for a trace
    turn: int
    system_prompt: int  # -1 for a trace


@dataclass(frozen=True)
class RequestStream:
    requests: tuple[StreamRequest, ...]
    kind: str
    source: str
    system_prompt_tokens: tuple[int, ...] = ()  # lengths of the system prompts

    @property
    def prompt_tokens(self) -> int:
        return sum(len(r.tokens) for r in self.requests)


def resolve_system_prompt(p: SystemPrompt, limits: Limits = LIMITS) -> list[int]:
    """Tokenize one explicit system prompt (text with SmolLM2's tokenizer, or a token spec)."""
    from explorer.tokens import encode_text, parse_token_list

    if p.text is not None:
        ids = encode_text(p.text)
        if not ids:
            raise BadInput("system prompt text tokenizes to nothing")
        if len(ids) > limits.max_prompt_tokens:
            raise BadInput(f"system prompt text is {len(ids):,} tokens, more than {limits.max_prompt_tokens:,}")
        return ids
    return parse_token_list(p.prompt, "system prompt", limits.max_prompt_tokens)


def tokenize(value: str, kind: str = "spec", limits: Limits = LIMITS) -> list[int]:
    """The router's tokenizer: ``kind = "spec"`` expands a token spec (``"0:1000, 7*200"``),
    ``"text"`` runs SmolLM2-135M's tokenizer (BadInput where its model file is missing)."""
    from explorer.tokens import encode_text, parse_token_spec

    if not isinstance(value, str) or not value.strip():
        raise BadInput("empty prompt")
    if kind == "spec":
        ids = parse_token_spec(value, limits.max_prompt_tokens * 4)
    elif kind == "text":
        ids = encode_text(value)
    else:
        raise BadInput(f"prompt kind must be 'spec' or 'text', got {kind!r}")
    if not ids:
        raise BadInput("the prompt has no tokens")
    if len(ids) > limits.max_prompt_tokens * 4:
        raise BadInput(f"the prompt has {len(ids):,} tokens, more than {limits.max_prompt_tokens * 4:,}")
    return ids


def chat_stream(w: WorkloadSpec, limits: Limits = LIMITS) -> RequestStream:
    """Chat sessions over shared system prompts, all drawn from ``w.seed``.

    Sessions start ``session_gap_ms`` apart on average (exponential gaps). A session belongs to
    tenant ``session mod tenants``, picks one of the system prompts, and has a number of turns
    in ``turns``. Turn j's prompt is the system prompt, then every earlier user message and
    reply, then the new user message; the reply is what the instance generates. The next turn
    arrives ``len(reply) x decode_ms`` plus an exponential think time later.
    """
    rng = random.Random(f"chat-{w.seed}")
    pop = range(VOCAB_SIZE)

    def draw(n: int) -> list[int]:
        return rng.choices(pop, k=n)

    systems: list[list[int]] = []
    if w.prompts:
        systems = [resolve_system_prompt(p, limits) for p in w.prompts]
    else:
        lo, hi = w.system_prompt_tokens
        systems = [draw(rng.randint(lo, hi)) for _ in range(w.system_prompts)]

    out: list[StreamRequest] = []
    heap: list[tuple[float, int, int]] = [(0.0, 0, -1)]  # (time, order, session; -1 = a new one)
    sessions: list[dict[str, Any]] = []
    order = 1
    total = 0
    while heap and len(out) < w.requests:
        now, _, sid = heapq.heappop(heap)
        if sid < 0:
            sid = len(sessions)
            sessions.append(
                {
                    "tenant": sid % w.tenants,
                    "system": rng.randrange(len(systems)),
                    "turns": rng.randint(*w.turns),
                    "history": [],
                    "turn": 0,
                }
            )
            heapq.heappush(heap, (now + rng.expovariate(1.0 / w.session_gap_ms), order, -1))
            order += 1
        s = sessions[sid]
        user = draw(rng.randint(*w.user_tokens))
        reply = draw(rng.randint(*w.output_tokens))
        prompt = tuple(systems[s["system"]] + s["history"] + user)
        total += len(prompt)
        if total > MAX_STREAM_TOKENS:
            raise BadInput(
                f"[workload]: the stream would hold more than {MAX_STREAM_TOKENS:,} prompt tokens; "
                "use fewer requests, turns or shorter prompts"
            )
        dur = len(reply) * w.decode_ms
        out.append(StreamRequest(len(out), now, prompt, tuple(reply), dur, s["tenant"], sid, s["turn"], s["system"]))
        s["history"] = s["history"] + user + reply
        s["turn"] += 1
        if s["turn"] < s["turns"]:
            think = rng.expovariate(1.0 / w.think_ms) if w.think_ms > 0 else 0.0
            heapq.heappush(heap, (now + dur + think, order, sid))
            order += 1
    return RequestStream(tuple(out), "chat", f"chat sessions (seed {w.seed})", tuple(len(s) for s in systems))


def trace_stream(w: WorkloadSpec, trace_bytes: bytes | None = None, source: str = "trace") -> RequestStream:
    """The first ``w.requests`` requests of a Mooncake trace, expanded as `explorer.traffic`
    expands them; arrivals at their timestamps (relative to the first), in flight for
    ``output_length x decode_ms``. Every request is tenant 0."""
    from explorer.traffic import trace as tr

    if trace_bytes is not None:
        trace = tr.parse_trace_bytes(trace_bytes, source, limit=w.requests, max_bytes=tr.UI_MAX_TRACE_BYTES)
    else:
        path = tr.shipped_trace_path()
        if not path.is_file():
            raise BadInput("[workload] trace: the shipped Mooncake trace is not installed here; upload one")
        trace = tr.load_trace(path, limit=w.requests)
        source = path.name
    reqs = []
    t0 = min(r.timestamp for r in trace.requests)
    total = 0
    for k, r in enumerate(trace.requests):
        prompt = tuple(tr.expand_prompt(r))
        total += len(prompt)
        if total > MAX_STREAM_TOKENS:
            raise BadInput(
                f"{source}: the first {k + 1} requests hold more than {MAX_STREAM_TOKENS:,} prompt tokens; use fewer requests"
            )
        output = (0,) * r.output_length if w.trace_outputs else ()
        reqs.append(
            StreamRequest(k, float(r.timestamp - t0), prompt, output, r.output_length * w.decode_ms, 0, -1, 0, -1)
        )
    reqs.sort(key=lambda q: (q.arrival_ms, q.index))
    reqs = [replace(q, index=i) for i, q in enumerate(reqs)]
    return RequestStream(tuple(reqs), "trace", source)


def build_stream(cfg: FleetConfig, trace_bytes: bytes | None = None, trace_name: str = "upload") -> RequestStream:
    w = cfg.workload
    if w.kind == "chat":
        return chat_stream(w)
    if w.trace == "upload" and trace_bytes is None:
        raise BadInput('[workload] trace = "upload": upload a Mooncake trace (JSON lines) first')
    return trace_stream(w, trace_bytes if w.trace == "upload" else None, trace_name)
