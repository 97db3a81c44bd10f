"""`python -m explorer ...`: the command line of design section 4.

Every command reports bad input as one line on stderr and exit code 2, never a traceback.
Feature modules are imported only by the command that needs them, so `hash` stays fast and
works without torch, zmq or Streamlit.

Each argument is checked where it is read: integers are ASCII digits (explorer/numbers.py),
seconds are finite and capped, text is valid UTF-8 (an argument of other bytes reaches Python as
lone surrogates, which no hash, event or file can hold). `main` turns a `BadInput` into one
line and exit 2, and so an exhausted memory (MemoryError: the input is bigger than this machine
holds, below the documented limits). Any other exception is a bug in the explorer and keeps its
traceback: catching everything would hide the bugs that the hostile-input tests exist to find.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Sequence

from explorer.errors import BadInput
from explorer.numbers import parse_int

MAX_SECONDS = 86_400.0  # --wait, --hold, --timeout: at most a day
MAX_BLOCK_SIZE = 1 << 16  # as in scenarios (explorer/scenario/spec.py)
MAX_MESSAGE = 1000  # characters of an error line


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (exit 2) instead of a usage dump."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise BadInput(f"{self.prog}: {message}")


def _int_at_least(lo: int, what: str, hi: int | None = None):
    """An argparse type: an integer >= ``lo`` (and <= ``hi``), ASCII digits only."""

    def convert(text: str) -> int:
        try:
            v = parse_int(text, "value")
        except BadInput:
            if hi is not None and text.isascii() and text.strip().isdigit():  # too many digits
                raise argparse.ArgumentTypeError(f"{_shown(text)} is more than the limit {hi:,}") from None
            raise argparse.ArgumentTypeError(f"expected an integer in ASCII digits, got {_shown(text)}") from None
        if v < lo:
            raise argparse.ArgumentTypeError(f"expected {what}, got {v}")
        if hi is not None and v > hi:
            raise argparse.ArgumentTypeError(f"{v:,} is more than the limit {hi:,}")
        return v

    return convert


_positive_int = _int_at_least(1, "a positive integer", hi=(1 << 63) - 1)
_nonneg_int = _int_at_least(0, "a non-negative integer", hi=(1 << 63) - 1)
_block_size = _int_at_least(1, "a positive integer", hi=MAX_BLOCK_SIZE)


def _number(hi: float, unit: str):
    """An argparse type: a finite number in [0, hi], written in ASCII."""

    def convert(text: str) -> float:
        try:
            if not text.isascii() or "_" in text:
                raise ValueError(text)
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {_shown(text)}") from None
        if not math.isfinite(v) or v < 0:
            raise argparse.ArgumentTypeError(f"expected a finite non-negative number, got {_shown(text)}")
        if v > hi:
            raise argparse.ArgumentTypeError(f"{v:g} {unit} is more than the limit {hi:g}")
        return v

    return convert


_seconds = _number(MAX_SECONDS, "seconds")


def _text(text: str) -> str:
    """An argparse type: text that is valid UTF-8 (not lone surrogates from undecodable bytes)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise argparse.ArgumentTypeError(
            f"not valid UTF-8 text (an undecodable byte at character {e.start + 1})"
        ) from None
    return text


def _shown(text: str) -> str:
    shown = repr(text)
    return shown if len(shown) <= 60 else shown[:57] + "..."


_step_ms = _number(60_000.0, "ms")


def _positive_step_ms(text: str) -> float:
    v = _step_ms(text)
    if v == 0:
        raise argparse.ArgumentTypeError("expected a positive number, got 0")
    return v


def _print_json(obj: object) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")


# ---- hash ------------------------------------------------------------------------------------


def _parse_mm(spec: str, i: int):
    from explorer.core.request import MultiModalFeature

    parts = spec.rsplit(":", 2)
    where = f"--mm #{i + 1} {_shown(spec)}"
    if len(parts) != 3 or not parts[0]:
        raise BadInput(f"{where}: expected ID:OFFSET:LENGTH")
    offset = parse_int(parts[1], f"{where}: OFFSET", lo=0, hi=(1 << 31) - 1)
    length = parse_int(parts[2], f"{where}: LENGTH", lo=1, hi=(1 << 31) - 1)
    return MultiModalFeature(parts[0], offset, length)


def cmd_hash(args: argparse.Namespace) -> int:
    from explorer.core.request import LoRARequest
    from explorer.hashcalc import block_hash_table, check_table_size
    from explorer.tokens import parse_token_spec, spec_length

    if args.tokens is not None:
        n = spec_length(args.tokens)  # counted, not expanded
        if n <= args.max_tokens:
            check_table_size(n, args.block_size)
        tokens = parse_token_spec(args.tokens, max_tokens=args.max_tokens)
    else:
        from explorer.tokens import encode_text  # the SmolLM2 tokenizer (BadInput if missing)

        tokens = encode_text(args.text)
    if not tokens:
        raise BadInput("no tokens to hash")
    if args.lora_path is not None and args.lora is None:
        raise BadInput("--lora-path needs --lora")
    lora = LoRARequest(args.lora, 1, args.lora_path or f"loras/{args.lora}") if args.lora is not None else None
    mm = [_parse_mm(s, i) for i, s in enumerate(args.mm or [])]
    _print_json(
        block_hash_table(
            tokens,
            args.block_size,
            args.algo,
            args.seed,
            lora,
            args.cache_salt,
            mm,
            args.group_id,
            args.group_block_size,
        )
    )
    return 0


# ---- commands implemented in feature modules -------------------------------------------------


def _lazy(module: str, func: str) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        import importlib

        return getattr(importlib.import_module(module), func)(args)

    return run


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="explorer", description="vLLM 0.31.0 prefix caching, step by step.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    h = sub.add_parser("hash", help="vLLM's exact block hashes for tokens or text")
    src = h.add_mutually_exclusive_group(required=True)
    src.add_argument("--tokens", type=_text, help='token spec, e.g. "0:1000, 7*200"')
    src.add_argument("--text", type=_text, help="text, tokenized with SmolLM2-135M's tokenizer")
    h.add_argument("--block-size", type=_block_size, default=16)
    h.add_argument("--algo", default="sha256", choices=["sha256", "sha256_cbor", "xxhash", "xxhash_cbor"])
    h.add_argument("--seed", type=_text, default=None, help="the PYTHONHASHSEED vLLM would read (default: unset)")
    h.add_argument("--lora", type=_text)
    h.add_argument("--lora-path", type=_text)
    h.add_argument("--cache-salt", type=_text)
    h.add_argument("--mm", type=_text, action="append", metavar="ID:OFFSET:LENGTH")
    h.add_argument("--group-id", type=_int_at_least(0, "a non-negative integer", hi=(1 << 32) - 1), default=0)
    h.add_argument(
        "--group-block-size", type=_block_size, default=None, help="list blocks as a group of this size sees them"
    )
    h.add_argument(
        "--max-tokens", type=_int_at_least(1, "a positive integer", hi=1 << 22), default=1 << 22, help=argparse.SUPPRESS
    )
    h.set_defaults(func=cmd_hash)

    r = sub.add_parser("run", help="replay a scenario TOML file")
    r.add_argument("file")
    r.add_argument("--json", action="store_true")
    r.set_defaults(func=_lazy("explorer.scenario.cli", "cmd_run"))

    t = sub.add_parser("replay", help="replay a Mooncake-format request trace")
    t.add_argument("trace")
    t.add_argument("--block-size", type=_block_size, default=16)
    t.add_argument("--num-blocks", type=_positive_int, default=10000)
    t.add_argument("--limit", type=_positive_int)
    t.add_argument("--outputs", action="store_true")
    t.add_argument("--json", action="store_true")
    t.add_argument("--num-blocks-list", type=_text, metavar="N,N,...", help="a sweep over cache sizes, hashing once")
    t.add_argument(
        "--policy",
        default="vllm",
        choices=["vllm", "lru", "unbounded", "scheduler", "all"],
        help="vllm's free-queue order, one request at a time (default); scheduler: concurrent, through "
        "vLLM's scheduler; simulators (not vLLM): lru, unbounded",
    )
    t.add_argument("--step-ms", type=_positive_step_ms, help="scheduler: ms of trace time per engine step (20)")
    t.add_argument(
        "--max-num-batched-tokens", type=_int_at_least(1, "a positive integer"), help="scheduler: token budget (2048)"
    )
    t.add_argument("--scheduler", choices=["async", "sync"], help="scheduler: AsyncScheduler (default) or Scheduler")
    t.set_defaults(func=_lazy("explorer.traffic.cli", "cmd_replay"), parser=t)

    f = sub.add_parser("prefill", help="measure the prefill time a cache hit saves")
    f.add_argument("--model", type=_text, default="tiny")
    f.add_argument("--device", type=_text, default="auto")
    f.add_argument("--prompt", type=_positive_int, default=1200)
    f.add_argument("--hit", type=_nonneg_int, default=992)
    f.add_argument("--json", action="store_true")
    f.set_defaults(func=_lazy("explorer.prefill.cli", "cmd_prefill"), parser=f)

    pub = sub.add_parser(
        "publish",
        help="publish a scenario's KV events over ZMQ",
        description="Replay a scenario and publish one KV event batch per op that queued events, in vLLM's "
        "wire format (sequence numbers from 0).",
    )
    pub.add_argument("scenario", help="the scenario TOML file to replay")
    pub.add_argument(
        "--endpoint",
        type=_text,
        required=True,
        help="where to publish: with * or :: (tcp://*:5557) it binds, as vLLM does; with a host it connects",
    )
    pub.add_argument(
        "--replay-endpoint", type=_text, help="also serve replay requests here (a ROUTER socket; it binds)"
    )
    pub.add_argument("--topic", type=_text, default="", help='the topic each batch is sent under (default "")')
    pub.add_argument(
        "--wait", type=_seconds, default=1.0, help="seconds to wait before the first batch, so subscribers can join (1)"
    )
    pub.add_argument(
        "--hold", type=_seconds, default=0.0, help="seconds to keep serving replay requests after the last batch (0)"
    )
    pub.set_defaults(func=_lazy("explorer.events.cli", "cmd_publish"), parser=pub)

    lis = sub.add_parser(
        "listen",
        help="subscribe to a vLLM KV event stream",
        description="Subscribe to a KV event stream (vLLM's or `publish`'s), decode every batch and count gaps, "
        "replays, losses, malformed frames and restarts.",
    )
    lis.add_argument(
        "--endpoint",
        type=_text,
        required=True,
        help="the publisher's endpoint: connects to it, or binds it with --bind",
    )
    lis.add_argument(
        "--replay-endpoint",
        type=_text,
        help="the publisher's replay endpoint: a first batch after seq 0, or a gap, is fetched again from there",
    )
    lis.add_argument(
        "--bind",
        action="store_true",
        help="bind the endpoint instead of connecting: for a publisher whose endpoint names a host (it connects)",
    )
    lis.add_argument("--topic", type=_text, default="", help='only batches whose topic starts with this (default "")')
    lis.add_argument("--max-batches", type=_positive_int, help="stop (exit 0) after printing this many batches")
    lis.add_argument("--timeout", type=_seconds, default=10.0, help="stop (exit 0) after this many idle seconds (10)")
    lis.add_argument(
        "--json", action="store_true", help="one JSON line per batch, then a summary line (else readable text)"
    )
    lis.set_defaults(func=_lazy("explorer.events.cli", "cmd_listen"), parser=lis)

    b = sub.add_parser(
        "bench", help="our `run --json` and op loop against vLLM's own classes on one long random scenario"
    )
    # 15,000 ops of the bench profile stay within the scenario limits (about 1.5M of 2.1M tokens)
    b.add_argument("--ops", type=_int_at_least(1, "a positive integer", hi=15_000), default=3000)
    # at most the scenario limit on engine.num_blocks (explorer/scenario/spec.py)
    b.add_argument("--num-blocks", type=_int_at_least(2, "an integer >= 2", hi=1 << 19), default=600)
    b.add_argument("--repeat", type=_int_at_least(1, "a positive integer", hi=50), default=5)
    b.add_argument("--seed", type=_nonneg_int, default=0)
    b.add_argument("--engine-steps", action="store_true", help="an engine-step scenario under both schedulers")
    b.add_argument("--json", action="store_true")
    b.set_defaults(func=_lazy("explorer.bench", "cmd_bench"), parser=b)
    return p


def _error_line(message: str) -> str:
    """One line, however the message was built: whitespace runs folded, control characters
    escaped, cut at MAX_MESSAGE."""
    line = " ".join(message.split())
    line = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in line)  # no terminal control
    return line if len(line) <= MAX_MESSAGE else line[: MAX_MESSAGE - 3] + "..."


def _tolerant_output() -> None:
    """Text output (titles, ids) never fails on a terminal whose encoding lacks a character."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")


def main(argv: Sequence[str] | None = None) -> int:
    _tolerant_output()
    try:
        args = build_parser().parse_args(argv)
        return args.func(args)
    except BadInput as e:
        sys.stderr.write(f"error: {_error_line(str(e))}\n")
        return 2
    except MemoryError:
        sys.stderr.write("error: out of memory: the input needs more memory than this machine has\n")
        return 2
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        return 130
