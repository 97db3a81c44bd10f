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
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from explorer.cli_args import (
    MAX_MESSAGE,
    _block_size,
    _int_at_least,
    _nonneg_int,
    _number,
    _Parser,
    _positive_int,
    _positive_step_ms,
    _print_json,
    _seconds,
    _shown,
    _text,
)
from explorer.errors import BadInput
from explorer.numbers import counted, parse_int

if TYPE_CHECKING:
    from explorer.core.request import MultiModalFeature

# ---- hash ------------------------------------------------------------------------------------


def _parse_mm(spec: str, i: int) -> MultiModalFeature:
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
    from explorer.extra_keys import check_extra_keys
    from explorer.hashcalc import block_hash_table, check_table_size
    from explorer.tokens import parse_token_spec, spec_length

    if args.lora_path is not None and args.lora is None:
        raise BadInput("--lora-path needs --lora")
    lora = LoRARequest(args.lora, 1, args.lora_path or f"loras/{args.lora}") if args.lora is not None else None
    mm = [_parse_mm(s, i) for i, s in enumerate(args.mm or [])]
    keys = (lora.lora_name, lora.lora_path) if lora is not None else None
    if args.tokens is not None:
        n = spec_length(args.tokens)  # counted, not expanded
        if n <= args.max_tokens:
            check_table_size(n, args.block_size)
            check_extra_keys(n, args.block_size, keys, args.cache_salt, mm)  # before any hashing
        tokens = parse_token_spec(args.tokens, max_tokens=args.max_tokens)
    else:
        from explorer.tokens import encode_text  # the SmolLM2 tokenizer (BadInput if missing)

        check_extra_keys(0, args.block_size, keys, args.cache_salt, mm)  # the strings, before tokenizing
        tokens = encode_text(args.text)
    if not tokens:
        raise BadInput("no tokens to hash")
    table = block_hash_table(
        tokens, args.block_size, args.algo, args.seed, lora, args.cache_salt, mm, args.group_id, args.group_block_size
    )
    if getattr(args, "vllm", None):
        # Both releases hash a block alike without speculative decoding (the drift list).
        table["vllm"] = args.vllm
    _print_json(table)
    # Notes go to stderr, so the JSON on stdout stays the contract's.
    if args.algo.startswith("xxhash") and args.seed is None:
        # vLLM logs the same: without PYTHONHASHSEED an xxhash NONE_HASH comes from a random seed.
        print(
            f"note: no --seed given, so xxhash's NONE_HASH came from a random seed ({table['hash_seed']}); "
            f"pass --seed {table['hash_seed']} to get the same hashes again",
            file=sys.stderr,
        )
    if not table["blocks"]:
        size = args.group_block_size or args.block_size
        print(
            f"note: {counted(len(tokens), 'token')} make{'s' if len(tokens) == 1 else ''} no full block of {size}: "
            "only full blocks get a hash",
            file=sys.stderr,
        )
    return 0


# ---- commands implemented in feature modules -------------------------------------------------


def _lazy(module: str, func: str) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        import importlib

        return getattr(importlib.import_module(module), func)(args)

    return run


def _vllm_option(parser: argparse.ArgumentParser) -> None:
    """``--vllm VERSION`` (design section 15): the release to follow, over ``engine.vllm``."""
    from explorer.core.release import RELEASES

    parser.add_argument("--vllm", choices=list(RELEASES), help="the vLLM release to follow (default: the scenario's)")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="explorer", description="vLLM 0.31.0 prefix caching, step by step.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    h = sub.add_parser("hash", help="vLLM's exact block hashes for tokens or text")
    src = h.add_mutually_exclusive_group(required=True)
    src.add_argument("--tokens", type=_text, help='token spec, e.g. "0:1000, 7*200"')
    src.add_argument("--text", type=_text, help="text, tokenized with SmolLM2-135M's tokenizer")
    h.add_argument("--block-size", type=_block_size, default=16, help="tokens per block (16)")
    h.add_argument(
        "--algo",
        default="sha256",
        choices=["sha256", "sha256_cbor", "xxhash", "xxhash_cbor"],
        help="vLLM's prefix_caching_hash_algo (sha256)",
    )
    h.add_argument("--seed", type=_text, default=None, help="the PYTHONHASHSEED vLLM would read (default: unset)")
    h.add_argument("--lora", type=_text, help="a LoRA adapter's name: an extra key on every block")
    h.add_argument("--lora-path", type=_text, help="the adapter's path (default loras/NAME)")
    h.add_argument("--cache-salt", type=_text, help="a cache salt: an extra key on block 0")
    h.add_argument(
        "--mm", type=_text, action="append", metavar="ID:OFFSET:LENGTH", help="a multimodal input (repeatable)"
    )
    h.add_argument(
        "--group-id",
        type=_int_at_least(0, "a non-negative integer", hi=(1 << 32) - 1),
        default=0,
        help="the KV cache group id in each block's key (0)",
    )
    h.add_argument(
        "--group-block-size", type=_block_size, default=None, help="list blocks as a group of this size sees them"
    )
    h.add_argument(
        "--max-tokens", type=_int_at_least(1, "a positive integer", hi=1 << 22), default=1 << 22, help=argparse.SUPPRESS
    )
    _vllm_option(h)
    h.set_defaults(func=cmd_hash)

    r = sub.add_parser("run", help="replay a scenario TOML file")
    r.add_argument("file", help="the scenario TOML file (docs/design.md section 3)")
    r.add_argument("--json", action="store_true", help="print the replay JSON instead of one line per step")
    r.add_argument(
        "--records",
        action="store_true",
        help="with --json: each step's records too, what the core reported, in order (docs/design.md section 5)",
    )
    _vllm_option(r)
    r.add_argument(
        "--vllm-diff", action="store_true", help="replay under 0.31.0 and 0.33.0; print the first step that differs"
    )
    r.set_defaults(func=_lazy("explorer.scenario.cli", "cmd_run"))

    t = sub.add_parser("replay", help="replay a Mooncake-format request trace")
    t.add_argument("trace", help="a Mooncake-format JSONL trace (timestamp, input_length, output_length, hash_ids)")
    t.add_argument("--block-size", type=_block_size, default=16, help="tokens per block (16)")
    t.add_argument(
        "--num-blocks", type=_positive_int, default=10000, help="the pool's blocks, the null block included (10000)"
    )
    t.add_argument("--limit", type=_positive_int, help="replay only the first N requests")
    t.add_argument("--outputs", action="store_true", help="also decode each request's output_length tokens")
    t.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
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
    t.add_argument(
        "--stream",
        action="store_true",
        help="read the trace line by line (any size, in bounded memory; default policy)",
    )
    t.add_argument(
        "--reasons",
        action="store_true",
        help="with --stream: also the missed tokens by reason and bound_infinite (memory then grows with the "
        "trace's distinct blocks, not its requests); bound_belady is null (it needs the trace's future)",
    )
    _vllm_option(t)
    t.set_defaults(func=_lazy("explorer.traffic.cli", "cmd_replay"), parser=t)

    g = sub.add_parser(
        "generate", help="write a Mooncake-format trace of N requests with the shipped trace's statistics"
    )
    g.add_argument("out", help="the JSONL file to write")
    g.add_argument(
        "--requests",
        type=_int_at_least(1, "a positive integer", hi=10_000_000),
        required=True,
        help="requests to write",
    )
    g.add_argument("--seed", type=_nonneg_int, default=0, help="the generator's seed (0)")
    g.set_defaults(func=_lazy("explorer.traffic.cli", "cmd_generate"), parser=g)

    sw = sub.add_parser("sweep", help="a grid of trace replays on Ray: a local instance, or a cluster with --ray")
    sw.add_argument("trace", help="a Mooncake-format JSONL trace")
    sw.add_argument("--num-blocks-list", type=_text, required=True, metavar="N,N,...", help="cache sizes in blocks")
    sw.add_argument("--block-size-list", type=_text, metavar="B,B,...", help="block sizes (default: --block-size)")
    sw.add_argument("--block-size", type=_block_size, default=16, help="tokens per block without a list (16)")
    sw.add_argument(
        "--policy-list", type=_text, default="vllm", metavar="P,P,...", help="vllm, lru, unbounded, scheduler"
    )
    sw.add_argument("--scheduler-list", type=_text, default="async", metavar="S,S", help="scheduler cells: async, sync")
    sw.add_argument("--ray", type=_text, metavar="ADDRESS", help="auto or HOST:PORT: join a running Ray cluster")
    sw.add_argument("--limit", type=_positive_int, help="replay only the first N requests")
    sw.add_argument("--outputs", action="store_true", help="also decode each request's output_length tokens")
    sw.add_argument("--step-ms", type=_positive_step_ms, help="scheduler: ms of trace time per engine step (20)")
    sw.add_argument(
        "--max-num-batched-tokens", type=_int_at_least(1, "a positive integer"), help="scheduler: token budget (2048)"
    )
    sw.add_argument("--json", action="store_true", help="print one JSON object: results, cells, backend, seconds")
    sw.set_defaults(func=_lazy("explorer.traffic.sweep_cli", "cmd_sweep"), parser=sw)

    f = sub.add_parser("prefill", help="measure the prefill time a cache hit saves")
    f.add_argument("--model", type=_text, default="tiny", help="tiny, smollm2-135m or llama3-8b-shape (tiny)")
    f.add_argument(
        "--device", type=_text, default="auto", help="cpu, cuda or auto: a CUDA GPU when there is one (auto)"
    )
    f.add_argument("--prompt", type=_positive_int, default=1200, help="prompt tokens (1200)")
    f.add_argument("--hit", type=_nonneg_int, default=992, help="tokens that hit the prefix cache (992)")
    f.add_argument("--json", action="store_true", help="print one JSON object")
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

    m = sub.add_parser("metrics", help="the Prometheus metrics vLLM exports for an engine-step scenario")
    m.add_argument("scenario", help="an engine-step scenario TOML file (docs/design.md section 7)")
    m.add_argument(
        "--serve",
        type=_int_at_least(0, "a port in [0, 65535]", hi=65535),
        metavar="PORT",
        help="serve the exposition on 127.0.0.1:PORT/metrics while the replay runs, one step per --pace seconds",
    )
    m.add_argument("--pace", type=_number(3600.0, "s"), default=1.0, help="seconds per engine step (1)")
    _vllm_option(m)
    m.set_defaults(func=_lazy("explorer.metrics.cli", "cmd_metrics"), parser=m)

    b = sub.add_parser(
        "bench", help="our `run --json` and op loop against vLLM's own classes on one long random scenario"
    )
    # 15,000 ops of the bench profile stay within the scenario limits (about 1.5M of 2.1M tokens)
    b.add_argument(
        "--ops", type=_int_at_least(1, "a positive integer", hi=15_000), default=3000, help="ops in the scenario (3000)"
    )
    # at most the scenario limit on engine.num_blocks (explorer/scenario/spec.py)
    b.add_argument(
        "--num-blocks", type=_int_at_least(2, "an integer >= 2", hi=1 << 19), default=600, help="pool size (600)"
    )
    b.add_argument(
        "--repeat",
        type=_int_at_least(1, "a positive integer", hi=50),
        default=5,
        help="runs of each side; the median is reported (5)",
    )
    b.add_argument("--seed", type=_nonneg_int, default=0, help="the random scenario's seed (0)")
    b.add_argument("--engine-steps", action="store_true", help="an engine-step scenario under both schedulers")
    b.add_argument("--reasons", action="store_true", help="the trace replay with and without the miss reasons")
    b.add_argument(
        "--sweep", action="store_true", help="8 cells of the shipped trace on local Ray against serial replays"
    )
    b.add_argument("--limit", type=_int_at_least(1, "a positive integer", hi=3993), help="--sweep: requests (300)")
    b.add_argument("--json", action="store_true", help="print one JSON object")
    _vllm_option(b)
    bench, bench_sweep = _lazy("explorer.bench", "cmd_bench"), _lazy("explorer.bench_sweep", "cmd_bench_sweep")
    b.set_defaults(func=lambda a: bench_sweep(a) if a.sweep else bench(a), parser=b)
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
