"""``python -m explorer publish`` and ``listen``: a scenario's events out, a publisher's events in."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable

from explorer.core.events import KVCacheEvent, KVEventBatch
from explorer.events.instance import AppliedBatch
from explorer.events.json_out import batch_line
from explorer.events.publisher import KVEventPublisher
from explorer.events.stream import DEFAULT_REPLAY_TIMEOUT, KVEventStream
from explorer.events.subscriber import KVEventSubscriber


def scenario_batches(path: str) -> list[list[KVCacheEvent]]:
    """The event lists of a scenario's replay, one per step that queued events (a lean replay:
    the events are all it needs)."""
    from explorer.scenario.engine import replay
    from explorer.scenario.parse import load_scenario

    trace = replay(load_scenario(path), record=False)
    return [list(step.events) for step in trace.steps if step.events]


def cmd_publish(args: argparse.Namespace) -> int:
    """``publish SCENARIO --endpoint E [--replay-endpoint R] [--topic T] [--wait S] [--hold S]``."""
    batches = scenario_batches(args.scenario)
    pub = KVEventPublisher(args.endpoint, args.replay_endpoint, topic=args.topic, linger=1.0)
    try:
        pub.serve_for(args.wait)
        for events in batches:
            pub.publish(KVEventBatch(time.time(), events))
            pub.serve(0.0)
        pub.serve_for(args.hold)
        result = {
            "batches": pub.published,
            "events": sum(len(b) for b in batches),
            "endpoint": pub.last_endpoint("pub") or pub.endpoint,  # the bound one, for port 0
            "replay_endpoint": pub.last_endpoint("replay") or pub.replay_endpoint,
            "replay_requests": pub.replay_requests,
        }
    finally:
        pub.close()
    sys.stdout.write(json.dumps(result) + "\n")
    return 0


def _human(a: AppliedBatch) -> str:
    kinds = Counter(type(e).__name__ for e in a.batch.events)
    what = ", ".join(f"{k} x{n}" for k, n in kinds.items()) or "no events"
    tag = " (replayed)" if a.replayed else ""
    return f"seq {a.seq} dp {a.batch.data_parallel_rank} ts {a.batch.ts:.6f}: {what}{tag}"


def listen(
    endpoint: str,
    replay_endpoint: str | None = None,
    *,
    bind: bool = False,
    topic: str = "",
    max_batches: int | None = None,
    timeout: float = 10.0,
    on_batch: Callable[[AppliedBatch], None] | None = None,
    on_ready: Callable[[KVEventSubscriber], None] | None = None,
    on_malformed: Callable[[str], None] | None = None,
) -> tuple[KVEventStream, int]:
    """Subscribe until ``max_batches`` batches were applied or ``timeout`` idle seconds passed.

    ``on_batch(AppliedBatch)`` is called for each batch in order (at most ``max_batches``);
    ``on_ready(subscriber)`` once the sockets exist; ``on_malformed(text)`` at the first
    malformed frame of each kind (all are counted in the summary). Returns the stream (counters, instances)
    and the number of batches handed to ``on_batch``.
    """
    sub = KVEventSubscriber(
        endpoint,
        replay_endpoint,
        bind=bind,
        topic=topic,
        replay_timeout=min(DEFAULT_REPLAY_TIMEOUT, max(timeout, 0.05)),
    )
    stream = sub.stream
    done = 0
    told: set[str] = set()

    def emit(applied: Iterable[AppliedBatch]) -> bool:
        nonlocal done
        for a in applied:
            if max_batches is not None and done >= max_batches:
                return True
            done += 1
            if on_batch is not None:
                on_batch(a)
        return max_batches is not None and done >= max_batches

    try:
        if on_ready is not None:
            on_ready(sub)
        # Idle is time spent waiting with nothing arriving: decoding and printing a burst do
        # not count, so a listener never ends while batches still wait on its socket.
        idle = 0.0
        full = False
        while not full and idle < timeout:
            fed = stream.live_frames + stream.replay_frames
            start = time.monotonic()
            applied = sub.poll(min(timeout - idle, 0.1))
            waited = time.monotonic() - start
            full = emit(applied)
            idle = 0.0 if stream.live_frames + stream.replay_frames != fed else idle + waited
            if on_malformed is not None:
                for reason, text in stream.first_malformed.items():
                    if reason not in told:
                        told.add(reason)
                        on_malformed(text)
        if not full:
            emit(stream.flush())
    finally:
        sub.close()
    return stream, done


def cmd_listen(args: argparse.Namespace) -> int:
    """``listen --endpoint E [--replay-endpoint R] [--bind] [--topic T] [--max-batches K]
    [--timeout S] [--json]``."""
    out = sys.stdout

    def on_batch(a: AppliedBatch) -> None:
        out.write((batch_line(a) if args.json else _human(a)) + "\n")
        out.flush()

    stream, printed = listen(
        args.endpoint,
        args.replay_endpoint,
        bind=args.bind,
        topic=args.topic,
        max_batches=args.max_batches,
        timeout=args.timeout,
        on_batch=on_batch,
        on_malformed=lambda text: print(
            f"listen: dropped a malformed frame ({text}); counted in malformed", file=sys.stderr, flush=True
        ),
    )
    summary = stream.summary()
    summary["batches"] = printed
    if args.json:
        out.write(json.dumps({"summary": summary}, allow_nan=False) + "\n")
    else:
        out.write("summary: " + ", ".join(f"{k} {v}" for k, v in summary.items()) + "\n")
    out.flush()
    return 0
