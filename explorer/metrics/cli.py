"""``python -m explorer metrics SCENARIO [--serve PORT] [--pace S]`` (design section 11).

Without ``--serve``: the replay's final Prometheus exposition on stdout, then the log line
vLLM's LoggingStatLogger would print for the whole replay as one interval (``--pace`` seconds
per step op), and with speculative decoding the SpecDecoding metrics line it logs after it. With it: the exposition served on loopback while the replay runs, one step op
every ``--pace`` seconds (explorer/metrics/serve.py). The families are the scenario's release's
(``--vllm`` overrides it; 0.33.0 adds its own, design section 15). Manager-level scenarios are
bad input: vLLM's metrics come from its scheduler's steps.
"""

from __future__ import annotations

import argparse
import sys

from explorer.errors import BadInput
from explorer.metrics.replay import recorder_at
from explorer.scenario.engine import replay
from explorer.scenario.parse import load_scenario
from explorer.scenario.parse_release import with_release
from explorer.scenario.trace import Trace

MIN_PACE = 0.01  # seconds per step op
MAX_PACE = 3600.0


def load_trace(path: str, vllm: str | None = None) -> Trace:
    scenario = with_release(load_scenario(path), vllm)
    if scenario.sched is None:
        raise BadInput(
            f"{path}: a manager-level scenario has no engine steps; metrics replays an engine-step "
            "scenario (one with a `step` op, design section 7)"
        )
    return replay(scenario, record=False)


def cmd_metrics(args: argparse.Namespace) -> int:
    if not MIN_PACE <= args.pace <= MAX_PACE:
        raise BadInput(f"--pace: expected seconds in [{MIN_PACE:g}, {MAX_PACE:g}], got {args.pace:g}")
    trace = load_trace(args.scenario, getattr(args, "vllm", None))
    if args.serve is not None:
        from explorer.metrics.serve import serve

        return serve(trace, args.serve, args.pace)
    rec = recorder_at(trace, pace=args.pace)
    sys.stdout.write(rec.exposition())
    sys.stdout.write("".join(text + "\n" for text in rec.log().lines))
    return 0
