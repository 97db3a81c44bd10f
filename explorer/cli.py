"""`python -m explorer ...`: the command line of design section 4.

Every command reports bad input as one line on stderr and exit code 2, never a traceback.
Feature modules are imported only by the command that needs them, so `hash` stays fast and
works without torch, zmq or Streamlit.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence

from explorer.errors import BadInput


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (exit 2) instead of a usage dump."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise BadInput(f"{self.prog}: {message}")


def _int_at_least(lo: int, what: str, hi: int | None = None):
    """An argparse type: an integer >= ``lo`` (and <= ``hi``), ASCII digits only."""

    def convert(text: str) -> int:
        if not text.isascii():
            raise argparse.ArgumentTypeError(f"expected an integer in ASCII digits, got {text!r}")
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if v < lo:
            raise argparse.ArgumentTypeError(f"expected {what}, got {v}")
        if hi is not None and v > hi:
            raise argparse.ArgumentTypeError(f"{v:,} is more than the limit {hi:,}")
        return v

    return convert


_positive_int = _int_at_least(1, "a positive integer")
_nonneg_int = _int_at_least(0, "a non-negative integer")


def _nonneg_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not v >= 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative number, got {text}")
    return v


def _positive_float(text: str) -> float:
    v = _nonneg_float(text)
    if v == 0:
        raise argparse.ArgumentTypeError("expected a positive number, got 0")
    return v


def _print_json(obj: object) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")


# ---- hash ------------------------------------------------------------------------------------


def _parse_mm(spec: str, i: int):
    from explorer.core.request import MultiModalFeature

    parts = spec.rsplit(":", 2)
    if len(parts) != 3 or not parts[0]:
        raise BadInput(f"--mm #{i + 1} {spec!r}: expected ID:OFFSET:LENGTH")
    try:
        offset, length = int(parts[1]), int(parts[2])
    except ValueError:
        raise BadInput(f"--mm #{i + 1} {spec!r}: OFFSET and LENGTH must be integers") from None
    return MultiModalFeature(parts[0], offset, length)


def cmd_hash(args: argparse.Namespace) -> int:
    from explorer.core.request import LoRARequest
    from explorer.hashcalc import block_hash_table
    from explorer.tokens import parse_token_spec

    if args.tokens is not None:
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
        block_hash_table(tokens, args.block_size, args.algo, args.seed, lora, args.cache_salt, mm, args.group_id)
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
    src.add_argument("--tokens", help='token spec, e.g. "0:1000, 7*200"')
    src.add_argument("--text", help="text, tokenized with SmolLM2-135M's tokenizer")
    h.add_argument("--block-size", type=_positive_int, default=16)
    h.add_argument("--algo", default="sha256", choices=["sha256", "sha256_cbor", "xxhash", "xxhash_cbor"])
    h.add_argument("--seed", default=None, help="the PYTHONHASHSEED vLLM would read (default: unset)")
    h.add_argument("--lora")
    h.add_argument("--lora-path")
    h.add_argument("--cache-salt")
    h.add_argument("--mm", action="append", metavar="ID:OFFSET:LENGTH")
    h.add_argument("--group-id", type=_nonneg_int, default=0)
    h.add_argument("--max-tokens", type=_positive_int, default=1 << 22, help=argparse.SUPPRESS)
    h.set_defaults(func=cmd_hash)

    r = sub.add_parser("run", help="replay a scenario TOML file")
    r.add_argument("file")
    r.add_argument("--json", action="store_true")
    r.set_defaults(func=_lazy("explorer.scenario.cli", "cmd_run"))

    t = sub.add_parser("replay", help="replay a Mooncake-format request trace")
    t.add_argument("trace")
    t.add_argument("--block-size", type=_positive_int, default=16)
    t.add_argument("--num-blocks", type=_positive_int, default=10000)
    t.add_argument("--limit", type=_positive_int)
    t.add_argument("--outputs", action="store_true")
    t.add_argument("--json", action="store_true")
    t.add_argument("--num-blocks-list", metavar="N,N,...", help="a sweep over cache sizes, hashing once")
    t.add_argument(
        "--policy",
        default="vllm",
        choices=["vllm", "lru", "unbounded", "scheduler", "all"],
        help="vllm's free-queue order, one request at a time (default); scheduler: concurrent, through "
        "vLLM's scheduler; simulators (not vLLM): lru, unbounded",
    )
    t.add_argument("--step-ms", type=_positive_float, help="scheduler: ms of trace time per engine step (20)")
    t.add_argument(
        "--max-num-batched-tokens", type=_int_at_least(1, "a positive integer"), help="scheduler: token budget (2048)"
    )
    t.add_argument("--scheduler", choices=["async", "sync"], help="scheduler: AsyncScheduler (default) or Scheduler")
    t.set_defaults(func=_lazy("explorer.traffic.cli", "cmd_replay"), parser=t)

    f = sub.add_parser("prefill", help="measure the prefill time a cache hit saves")
    f.add_argument("--model", default="tiny")
    f.add_argument("--device", default="auto")
    f.add_argument("--prompt", type=_positive_int, default=1200)
    f.add_argument("--hit", type=_nonneg_int, default=992)
    f.add_argument("--json", action="store_true")
    f.set_defaults(func=_lazy("explorer.prefill.cli", "cmd_prefill"), parser=f)

    pub = sub.add_parser("publish", help="publish a scenario's KV events over ZMQ")
    pub.add_argument("scenario")
    pub.add_argument("--endpoint", required=True)
    pub.add_argument("--replay-endpoint")
    pub.add_argument("--topic", default="")
    pub.add_argument("--wait", type=_nonneg_float, default=1.0)
    pub.add_argument("--hold", type=_nonneg_float, default=0.0)
    pub.set_defaults(func=_lazy("explorer.events.cli", "cmd_publish"), parser=pub)

    lis = sub.add_parser("listen", help="subscribe to a vLLM KV event stream")
    lis.add_argument("--endpoint", required=True)
    lis.add_argument("--replay-endpoint")
    lis.add_argument("--bind", action="store_true")
    lis.add_argument("--topic", default="")
    lis.add_argument("--max-batches", type=_positive_int)
    lis.add_argument("--timeout", type=_nonneg_float, default=10.0)
    lis.add_argument("--json", action="store_true")
    lis.set_defaults(func=_lazy("explorer.events.cli", "cmd_listen"), parser=lis)

    b = sub.add_parser(
        "bench", help="our `run --json` and op loop against vLLM's own classes on one long random scenario"
    )
    b.add_argument("--ops", type=_int_at_least(1, "a positive integer", hi=200_000), default=3000)
    b.add_argument("--num-blocks", type=_int_at_least(2, "an integer >= 2", hi=1 << 20), default=600)
    b.add_argument("--repeat", type=_int_at_least(1, "a positive integer", hi=50), default=5)
    b.add_argument("--seed", type=_nonneg_int, default=0)
    b.add_argument("--engine-steps", action="store_true", help="an engine-step scenario under both schedulers")
    b.add_argument("--json", action="store_true")
    b.set_defaults(func=_lazy("explorer.bench", "cmd_bench"), parser=b)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        return args.func(args)
    except BadInput as e:
        sys.stderr.write(f"error: {e}\n")
        return 2
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        return 130
