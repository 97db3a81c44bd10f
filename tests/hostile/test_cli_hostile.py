"""Hostile input through the real command line: one line on stderr naming what is wrong, exit 2,
nothing on stdout, no traceback, and the child inside a 512 MiB address space.

Each case is one of issue 13's reproductions or another of the same kind. Run this file as a
script to print each case's line and peak memory.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.hostile.helpers import assert_one_line_error, run_cli

SURROGATE = "\udcff"  # the byte 0xff, which is not UTF-8, as Python decodes it from argv
CESU = "\udced\udcb3\udcbf"  # what a shell's $'\udcff' becomes: the three bytes ED B3 BF

# (case id, the arguments given the files, the pattern the error line must match)
Case = tuple[str, Callable[[dict[str, str]], list[str]], str]


def _scenario_files(d: Path) -> dict[str, str]:
    """The hostile files, written once (the big ones are sparse or small to write)."""
    files: dict[str, str] = {}

    def put(name: str, text: str | bytes) -> None:
        p = d / name
        if isinstance(text, bytes):
            p.write_bytes(text)
        else:
            p.write_text(text, encoding="utf-8")
        files[name] = str(p)

    arrive = "[[steps]]\nop = 'arrive'\nid = 'A'\nprompt = '0:16'\n[[steps]]\nop = 'admit'\nid = 'A'\n"
    put("deep_arrays.toml", "[[steps]]\nop = 'arrive'\nid = 'A'\nprompt = " + "[" * 5000 + "]" * 5000 + "\n")
    put("deep_tables.toml", "x = " + "{a = " * 3000 + "1" + "}" * 3000 + "\n")
    put("nul.toml", b"title = 'x'\x00\n")
    put("latin1.toml", "title = 'caf\xe9'\n".encode("latin-1"))
    put("surrogate_escape.toml", 'title = "\\ud800"\n')
    # the largest max_model_len allowed does not lift the per-op cap
    put(
        "sample_huge.toml",
        "[engine]\nmax_model_len = 16777216\n"
        + arrive
        + "[[steps]]\nop = 'sample'\nid = 'A'\ntokens = '0*300000000'\n",
    )
    put(
        "generate_total.toml",
        "[engine]\nmax_model_len = 16777216\n"
        + arrive
        + "[[steps]]\nop = 'generate'\nid = 'A'\ntokens = '0*1500000'\n" * 2,
    )
    put("generate_recorded.toml", arrive + "[[steps]]\nop = 'generate'\nid = 'A'\ntokens = '0*600000'\n")
    put("max_model_len.toml", "[engine]\nmax_model_len = 9223372036854775807\n" + arrive)
    put("blocks_4m.toml", "[engine]\nnum_blocks = 4000000\n" + "[[steps]]\nop = 'reset'\n" * 40)
    put("blocks_500k.toml", "[engine]\nnum_blocks = 500000\n" + "[[steps]]\nop = 'reset'\n" * 40)
    put("reset_walks.toml", "[engine]\nnum_blocks = 524288\n" + "[[steps]]\nop = 'reset'\n" * 129)
    put(
        "arrivals_2000.toml",
        "[engine]\nnum_blocks = 70000\n"
        + "".join(
            f"[[steps]]\nop = 'arrive'\nid = 'r{i}'\nprompt = '{i * 4096}:{(i + 1) * 4096}'\n" for i in range(2000)
        ),
    )
    put(
        "arrivals_500.toml",
        "[engine]\nnum_blocks = 70000\n"
        + "".join(
            f"[[steps]]\nop = 'arrive'\nid = 'r{i}'\nprompt = '{i * 4096}:{(i + 1) * 4096}'\n" for i in range(500)
        ),
    )
    put("arrivals_many.toml", "".join(f"[[steps]]\nop = 'arrive'\nid = 'r{i}'\nprompt = '1'\n" for i in range(50_001)))
    put("steps_many.toml", "[[steps]]\nop = 'reset'\n" * 100_001)
    put("expect_datetime.toml", arrive + "expect = { ok = 1979-05-27T07:32:00Z }\n")
    put("expect_float.toml", arrive + "expect = { num_free_blocks = 1.5 }\n")
    put("expect_mixed.toml", arrive + "expect = { free_queue = [1, 'a'] }\n")
    put("op_long.toml", "[[steps]]\nop = '" + "x" * 100_000 + "'\n")
    put("prompt_nested.toml", "[[steps]]\nop = 'arrive'\nid = 'A'\nprompt = [[1]]\n")
    put("token_overflow.toml", "[[steps]]\nop = 'arrive'\nid = 'A'\nprompt = [99999999999999999999]\n")
    put("spec_digits.toml", "[[steps]]\nop = 'arrive'\nid = 'A'\nprompt = '٣:٩٩'\n")
    put("spec_fullwidth.toml", "[[steps]]\nop = 'arrive'\nid = 'A'\nprompt = '０:３２'\n")
    put("ok.toml", arrive)
    big = d / "big.toml"
    with big.open("wb") as f:
        f.truncate((16 << 20) + 1)  # sparse: refused before it is read
    files["big.toml"] = str(big)
    trace_deep = d / "deep.jsonl"
    trace_deep.write_text("[" * 100_000 + "]" * 100_000 + "\n")
    files["deep.jsonl"] = str(trace_deep)
    line = json.dumps({"timestamp": 0, "input_length": 1048000, "output_length": 500, "hash_ids": list(range(2048))})
    line += "\n"
    put("blocks.jsonl", line * 257)  # 257 x 65,500 prompt blocks: more than 2**24 to hash
    put("outputs.jsonl", '{"timestamp": 0, "input_length": 5, "output_length": 1000000, "hash_ids": [1]}\n' * 5)
    fifo = d / "fifo.toml"
    os.mkfifo(fifo)  # no writer: opening it for reading would block
    files["fifo"] = str(fifo)
    files["dir"] = str(d)
    files["missing"] = str(d / "missing.toml")
    return files


CASES: list[Case] = [
    # hash: text that is not UTF-8, digits of other scripts, sizes
    (
        "hash-cbor-salt-surrogate",
        lambda f: ["hash", "--tokens", "0:32", "--algo", "sha256_cbor", "--cache-salt", CESU],
        r"--cache-salt: not valid UTF-8",
    ),
    (
        "hash-xxcbor-lora-surrogate",
        lambda f: ["hash", "--tokens", "0:32", "--algo", "xxhash_cbor", "--lora", CESU],
        r"--lora: not valid UTF-8",
    ),
    (
        "hash-sha256-salt-surrogate",
        lambda f: ["hash", "--tokens", "0:32", "--cache-salt", SURROGATE],
        r"--cache-salt: not valid UTF-8",
    ),
    (
        "hash-seed-surrogate",
        lambda f: ["hash", "--tokens", "0:32", "--algo", "sha256_cbor", "--seed", SURROGATE],
        r"--seed: not valid UTF-8",
    ),
    (
        "hash-lora-path-surrogate",
        lambda f: ["hash", "--tokens", "0:32", "--lora", "a", "--lora-path", SURROGATE],
        r"--lora-path: not valid UTF-8",
    ),
    (
        "hash-mm-id-surrogate",
        lambda f: ["hash", "--tokens", "0:32", "--mm", SURROGATE + ":0:4"],
        r"--mm: not valid UTF-8",
    ),
    ("hash-text-surrogate", lambda f: ["hash", "--text", SURROGATE], r"--text: not valid UTF-8"),
    ("hash-spec-arabic-digits", lambda f: ["hash", "--tokens", "٣:٩٩"], r"ASCII digits"),
    ("hash-spec-fullwidth-digits", lambda f: ["hash", "--tokens", "０:３２"], r"ASCII digits"),
    ("hash-spec-superscript", lambda f: ["hash", "--tokens", "²"], r"ASCII digits"),
    (
        "hash-mm-superscript-offset",
        lambda f: ["hash", "--tokens", "0:32", "--mm", "img:²:5"],
        r"OFFSET: expected an integer in ASCII digits",
    ),
    (
        "hash-mm-arabic-length",
        lambda f: ["hash", "--tokens", "0:32", "--mm", "img:0:٣"],
        r"LENGTH: expected an integer in ASCII digits",
    ),
    ("hash-mm-shape", lambda f: ["hash", "--tokens", "0:32", "--mm", "img"], r"expected ID:OFFSET:LENGTH"),
    (
        "hash-block-size-arabic",
        lambda f: ["hash", "--tokens", "0:32", "--block-size", "١٦"],
        r"--block-size: expected an integer in ASCII digits",
    ),
    (
        "hash-block-size-huge",
        lambda f: ["hash", "--tokens", "0:32", "--block-size", "1000000000"],
        r"--block-size: .*more than the limit",
    ),
    (
        "hash-group-id-huge",
        lambda f: ["hash", "--tokens", "0:32", "--group-id", str(1 << 40)],
        r"--group-id: .*more than the limit",
    ),
    ("hash-spec-300m", lambda f: ["hash", "--tokens", "0*300000000"], r"300,000,000 tokens, more than the limit"),
    ("hash-spec-1000-digits", lambda f: ["hash", "--tokens", "9" * 1000], r"out of range \[0, 2\*\*31\)"),
    (
        "hash-too-many-blocks",
        lambda f: ["hash", "--tokens", "0:4000000", "--block-size", "1"],
        r"full blocks, more than",
    ),
    ("hash-empty-spec", lambda f: ["hash", "--tokens", " "], r"token spec is empty"),
    # run: files that are not regular, too big, not text, nested too deep
    ("run-dev-zero", lambda f: ["run", "/dev/zero"], r"/dev/zero: is a character device"),
    ("run-dev-null", lambda f: ["run", "/dev/null"], r"/dev/null: is a character device"),
    ("run-fifo-no-writer", lambda f: ["run", f["fifo"]], r"is a FIFO"),
    ("run-directory", lambda f: ["run", f["dir"]], r"is a directory"),
    ("run-missing", lambda f: ["run", f["missing"]], r"no such file"),
    ("run-path-not-utf8", lambda f: ["run", f["missing"] + SURROGATE], r"no such file"),
    ("run-sparse-16mib", lambda f: ["run", f["big.toml"]], r"more than the 16,777,216-byte limit"),
    ("run-nul-bytes", lambda f: ["run", f["nul.toml"]], r"not a text file"),
    ("run-latin1", lambda f: ["run", f["latin1.toml"]], r"not a UTF-8 text file"),
    ("run-deep-arrays", lambda f: ["run", f["deep_arrays.toml"]], r"not valid TOML"),
    ("run-deep-tables", lambda f: ["run", f["deep_tables.toml"]], r"not valid TOML"),
    ("run-surrogate-escape", lambda f: ["run", f["surrogate_escape.toml"]], r"not valid TOML"),
    # run: sizes capped before the work
    (
        "run-sample-300m-tokens",
        lambda f: ["run", f["sample_huge.toml"]],
        r"sample A\): tokens: expands to 300,000,000 tokens, more than the limit per op",
    ),
    (
        "run-generate-total",
        lambda f: ["run", f["generate_total.toml"], "--json"],
        r"tokens in all, more than the limit 2,097,152",
    ),
    (
        "run-generate-600k-text",
        lambda f: ["run", f["generate_recorded.toml"]],
        r"recording 600,000 generated tokens keeps a report of each, more than the limit 524,288",
    ),
    (
        "run-max-model-len-2**63",
        lambda f: ["run", f["max_model_len.toml"]],
        r"engine.max_model_len: 9223372036854775807 is out of range",
    ),
    ("run-4m-blocks-40-resets", lambda f: ["run", f["blocks_4m.toml"]], r"engine.num_blocks: 4000000 is out of range"),
    (
        "run-500k-blocks-40-resets-text",
        lambda f: ["run", f["blocks_500k.toml"]],
        r"20,500,000 block entries.*`run --json`",
    ),
    ("run-reset-walks", lambda f: ["run", f["reset_walks.toml"], "--json"], r"resets walk .* more than the limit"),
    ("run-2000-arrivals-of-4096", lambda f: ["run", f["arrivals_2000.toml"]], r"tokens in all, more than the limit"),
    (
        "run-500-arrivals-of-4096-text",
        lambda f: ["run", f["arrivals_500.toml"]],
        r"block entries.*more than the limit 16,777,216",
    ),
    (
        "run-50001-arrivals",
        lambda f: ["run", f["arrivals_many.toml"], "--json"],
        r"more than the limit of 50,000 arrive steps",
    ),
    ("run-100001-steps", lambda f: ["run", f["steps_many.toml"], "--json"], r"100,001 steps, more than the limit"),
    (
        "run-expect-datetime",
        lambda f: ["run", f["expect_datetime.toml"]],
        r"expect.ok: expected true or false, got the TOML date/time",
    ),
    ("run-expect-float", lambda f: ["run", f["expect_float.toml"]], r"expect.num_free_blocks: expected an integer"),
    (
        "run-expect-mixed-array",
        lambda f: ["run", f["expect_mixed.toml"]],
        r"expect.free_queue: expected an array of integers",
    ),
    ("run-op-100k-chars", lambda f: ["run", f["op_long.toml"]], r"unknown op 'xxxx.*\.\.\."),
    ("run-prompt-nested", lambda f: ["run", f["prompt_nested.toml"]], r"tokens\[0\] = \[1\] is not a token id"),
    (
        "run-token-overflow",
        lambda f: ["run", f["token_overflow.toml"]],
        r"tokens\[0\] = 99999999999999999999 is not a token id",
    ),
    ("run-spec-arabic-digits", lambda f: ["run", f["spec_digits.toml"]], r"prompt: bad token spec part .*ASCII digits"),
    (
        "run-spec-fullwidth-digits",
        lambda f: ["run", f["spec_fullwidth.toml"]],
        r"prompt: bad token spec part .*ASCII digits",
    ),
    # replay
    ("replay-dev-zero", lambda f: ["replay", "/dev/zero"], r"/dev/zero: is a character device"),
    ("replay-fifo", lambda f: ["replay", f["fifo"]], r"is a FIFO"),
    ("replay-deep-json", lambda f: ["replay", f["deep.jsonl"]], r"line 1: not JSON"),
    (
        "replay-step-ms-nan",
        lambda f: ["replay", f["missing"], "--policy", "scheduler", "--step-ms", "nan"],
        r"--step-ms: expected a finite",
    ),
    (
        "replay-step-ms-inf",
        lambda f: ["replay", f["missing"], "--policy", "scheduler", "--step-ms", "inf"],
        r"--step-ms: expected a finite",
    ),
    (
        "replay-sizes-fullwidth",
        lambda f: ["replay", "data/mooncake_synthetic_trace.jsonl", "--num-blocks-list", "１,2"],
        r"cache sizes: .* ASCII digits",
    ),
    (
        "replay-num-blocks-30-digits",
        lambda f: ["replay", f["missing"], "--num-blocks", "1" + "0" * 30],
        r"--num-blocks: .*more than the limit",
    ),
    (
        "replay-block-size-superscript",
        lambda f: ["replay", f["missing"], "--block-size", "²"],
        r"--block-size: expected an integer in ASCII digits",
    ),
    (
        "replay-too-many-prompt-blocks",
        lambda f: ["replay", f["blocks.jsonl"]],
        r"16,833,500 prompt blocks at block size 16 is more than the 16,777,216 allowed",
    ),
    (
        "replay-too-many-outputs",
        lambda f: ["replay", f["outputs.jsonl"], "--outputs"],
        r"5,000,000 output tokens to decode is more than the 4,194,304 allowed",
    ),
    (
        "replay-sizes-over-the-sweep",
        lambda f: [
            "replay",
            "data/mooncake_synthetic_trace.jsonl",
            "--num-blocks-list",
            "4000000,4000001,4000002,4000003,4000004",
        ],
        r"20,000,010 blocks in all is more than the 16,777,216 a sweep builds",
    ),
    # metrics
    ("metrics-deep-scenario", lambda f: ["metrics", f["deep_arrays.toml"]], r"not valid TOML"),
    ("metrics-fifo", lambda f: ["metrics", f["fifo"]], r"is a FIFO"),
    ("metrics-manager-level", lambda f: ["metrics", f["ok.toml"]], r"manager-level scenario"),
    ("metrics-pace-inf", lambda f: ["metrics", f["ok.toml"], "--pace", "inf"], r"finite"),
    ("metrics-port-digits", lambda f: ["metrics", f["ok.toml"], "--serve", "٣"], r"ASCII digits"),
    # publish
    (
        "publish-deep-scenario",
        lambda f: ["publish", f["deep_arrays.toml"], "--endpoint", "tcp://127.0.0.1:1"],
        r"not valid TOML",
    ),
    ("publish-fifo", lambda f: ["publish", f["fifo"], "--endpoint", "tcp://127.0.0.1:1"], r"is a FIFO"),
    (
        "publish-hold-inf",
        lambda f: ["publish", f["ok.toml"], "--endpoint", "tcp://127.0.0.1:1", "--hold", "inf"],
        r"--hold: expected a finite",
    ),
    (
        "publish-wait-inf",
        lambda f: ["publish", f["ok.toml"], "--endpoint", "tcp://127.0.0.1:1", "--wait", "inf"],
        r"--wait: expected a finite",
    ),
    (
        "publish-wait-nan",
        lambda f: ["publish", f["ok.toml"], "--endpoint", "tcp://127.0.0.1:1", "--wait", "nan"],
        r"--wait: expected a finite",
    ),
    (
        "publish-hold-a-year",
        lambda f: ["publish", f["ok.toml"], "--endpoint", "tcp://127.0.0.1:1", "--hold", "3e7"],
        r"--hold: .*more than the limit 86400",
    ),
    (
        "publish-wait-arabic",
        lambda f: ["publish", f["ok.toml"], "--endpoint", "tcp://127.0.0.1:1", "--wait", "٣"],
        r"--wait: expected a number",
    ),
    (
        "publish-topic-surrogate",
        lambda f: ["publish", f["ok.toml"], "--endpoint", "tcp://127.0.0.1:1", "--topic", SURROGATE],
        r"--topic: not valid UTF-8",
    ),
    (
        "publish-source-destination",
        lambda f: ["publish", f["ok.toml"], "--endpoint", "tcp://[::1%lo]:0;127.0.0.3:5701"],
        r"source;destination",
    ),
    (
        "publish-sample-300m",
        lambda f: ["publish", f["sample_huge.toml"], "--endpoint", "tcp://127.0.0.1:1"],
        r"more than the limit per op",
    ),
    # listen
    (
        "listen-topic-not-utf8",
        lambda f: ["listen", "--endpoint", "tcp://127.0.0.1:1", "--topic", SURROGATE],
        r"--topic: not valid UTF-8",
    ),
    (
        "listen-scope-id-source-destination",
        lambda f: ["listen", "--endpoint", "tcp://[::1%lo]:0;127.0.0.3:5701"],
        r"source;destination",
    ),
    ("listen-scope-id", lambda f: ["listen", "--endpoint", "tcp://[::1%lo]:5701"], r"IPv6 zone id"),
    (
        "listen-port-superscript",
        lambda f: ["listen", "--endpoint", "tcp://127.0.0.1:²"],
        r"port must be \* or 0..65535 in ASCII digits",
    ),
    ("listen-port-arabic", lambda f: ["listen", "--endpoint", "tcp://127.0.0.1:٥٥٥٧"], r"port must be"),
    (
        "listen-host-markdown",
        lambda f: ["listen", "--endpoint", "tcp://a![p](http://127.0.0.1:8799/x.png):1"],
        r"is not a host",
    ),
    ("listen-ipc-too-long", lambda f: ["listen", "--endpoint", "ipc://" + "a" * 200], r"at most 107 bytes"),
    (
        "listen-replay-endpoint-bad",
        lambda f: ["listen", "--endpoint", "tcp://127.0.0.1:1", "--replay-endpoint", "tcp://h:99999"],
        r"--replay-endpoint .*port must be",
    ),
    (
        "listen-timeout-inf",
        lambda f: ["listen", "--endpoint", "tcp://127.0.0.1:1", "--timeout", "inf"],
        r"--timeout: expected a finite",
    ),
    (
        "listen-timeout-negative",
        lambda f: ["listen", "--endpoint", "tcp://127.0.0.1:1", "--timeout", "-1"],
        r"--timeout: expected a finite non-negative",
    ),
    (
        "listen-max-batches-arabic",
        lambda f: ["listen", "--endpoint", "tcp://127.0.0.1:1", "--max-batches", "٣"],
        r"--max-batches: expected an integer in ASCII digits",
    ),
    # bench, prefill, the parser itself
    (
        "bench-ops-10**12",
        lambda f: ["bench", "--ops", "1000000000000"],
        r"--ops: 1,000,000,000,000 is more than the limit 15,000",
    ),
    ("bench-ops-arabic", lambda f: ["bench", "--ops", "٣"], r"--ops: expected an integer in ASCII digits"),
    ("bench-repeat-huge", lambda f: ["bench", "--repeat", "1000"], r"--repeat: 1,000 is more than the limit 50"),
    (
        "prefill-prompt-superscript",
        lambda f: ["prefill", "--prompt", "²"],
        r"--prompt: expected an integer in ASCII digits",
    ),
    ("prefill-prompt-huge", lambda f: ["prefill", "--prompt", "1000000000"], r"longer than .* context"),
    ("prefill-model-surrogate", lambda f: ["prefill", "--model", SURROGATE], r"--model: not valid UTF-8"),
    ("unknown-command", lambda f: ["frobnicate"], r"invalid choice"),
    ("no-command", lambda f: [], r"required"),
]


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    return _scenario_files(tmp_path_factory.mktemp("hostile"))


@pytest.mark.parametrize("args, pattern", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_hostile_input_gives_one_line(files, args, pattern):
    assert_one_line_error(run_cli(*args(files)), pattern)


def test_the_well_formed_control_runs(files):
    """The same harness on a good scenario: exit 0 and output, so the cases above can fail."""
    r = run_cli("run", files["ok.toml"], "--json")
    assert r.rc == 0 and r.stdout.startswith(b'{"steps"') and r.stderr == b""


def test_the_500_arrivals_that_text_mode_refuses_run_lean(files):
    """run --json keeps no per-step snapshot: the scenario the text form refuses runs, in bounds."""
    r = run_cli("run", files["arrivals_500.toml"], "--json", memory=1 << 30)
    assert r.rc == 0, r.err_text[-2000:]
    assert r.peak_kib < 600 << 10


if __name__ == "__main__":  # a table of every case: its line and the child's peak memory
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        fs = _scenario_files(Path(d))
        for name, make, _ in CASES:
            res = run_cli(*make(fs))
            line = res.err_text.strip().replace("\n", " | ")
            sys.stdout.write(f"{name}\texit {res.rc}\t{res.peak_kib / 1024:.0f} MiB\t{line}\n")


def test_run_text_shows_control_characters_of_titles_and_ids_as_escapes(tmp_path):
    """A title or id may hold DEL, ESC or a bidi override (valid TOML escapes): the text form
    prints them as visible escapes, never as raw bytes a terminal would act on."""
    f = tmp_path / "ctl.toml"
    f.write_text(
        'title = "t\\u001b[31mred\\u007f"\n[engine]\nnum_blocks = 8\nblock_size = 4\n'
        '[[steps]]\nop = "arrive"\nid = "A\\u202e"\nprompt = "0:8"\n[[steps]]\nop = "admit"\nid = "A\\u202e"\n',
        encoding="utf-8",
    )
    r = run_cli("run", str(f))
    assert r.rc == 0, r.err_text
    out = r.stdout.decode("utf-8")
    assert "t\\x1b[31mred\\x7f" in out and "A\\u202e" in out
    assert not any(c in out for c in "\x1b\x7f\u202e")
