"""Scenario files and `explorer run` (design sections 3 and 5): parsing, op semantics, bad
input, expectations. The conformance tier proves the numbers against vLLM; these tests pin the
contract of the command itself."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from explorer.errors import BadInput
from explorer.scenario.engine import replay
from explorer.scenario.parse import parse_scenario_text
from explorer.scenario.records import Lookup
from explorer.scenario.write import scenario_to_toml
from tests.cli_run import run_explorer

ROOT = Path(__file__).resolve().parents[2]

HEAD = "[engine]\nblock_size = 4\nnum_blocks = 8\n"


def run(path: Path, *flags: str) -> subprocess.CompletedProcess:
    return run_explorer("run", str(path), *flags, cwd=ROOT)


def write(tmp_path: Path, body: str, name: str = "s.toml") -> Path:
    p = tmp_path / name
    p.write_text(body)
    return p


def steps(*tables: str) -> str:
    return HEAD + "".join(f"\n[[steps]]\n{t}\n" for t in tables)


ARRIVE_A = 'op = "arrive"\nid = "A"\nprompt = "0:10"'
ADMIT_A = 'op = "admit"\nid = "A"'

# (scenario text, words the one error line must contain)
BAD = {
    "malformed TOML": ("title = \n[[steps]", ["not valid TOML"]),
    "unknown op": (steps('op = "teleport"\nid = "A"'), ["step 1", "unknown op 'teleport'"]),
    "unknown key": (steps(ARRIVE_A + '\ncolour = "red"'), ["step 1 (arrive A)", "colour"]),
    "unknown expect key": (steps(ARRIVE_A, ADMIT_A + "\nexpect = { hits = 3 }"), ["step 2 (admit A)", "expect.hits"]),
    "expect key the op does not report": (steps(ARRIVE_A + "\nexpect = { hit_tokens = 0 }"), ["step 1", "hit_tokens"]),
    "letters in a token spec": (
        steps('op = "arrive"\nid = "A"\nprompt = "0:1o"'),
        ["step 1 (arrive A)", "prompt", "0:1o"],
    ),
    "negative range": (steps('op = "arrive"\nid = "A"\nprompt = "-3:4"'), ["prompt", "-3:4"]),
    "reversed range": (steps('op = "arrive"\nid = "A"\nprompt = "9:4"'), ["prompt", "start 9 is after end 4"]),
    "block size 0": ("[engine]\nblock_size = 0\n", ["engine.block_size"]),
    "num_blocks below 2": ("[engine]\nnum_blocks = 1\n", ["engine.num_blocks"]),
    "prompt past max_model_len": (
        "[engine]\nmax_model_len = 8\n[[steps]]\n" + 'op = "arrive"\nid = "A"\nprompt = "0:9"',
        ["prompt", "max_model_len"],
    ),
    "empty prompt": (steps('op = "arrive"\nid = "A"\nprompt = []'), ["prompt", "empty prompt"]),
    "unknown request id": (steps(ADMIT_A), ["step 1 (admit A)", "id", "no live request 'A'"]),
    "duplicate live id": (steps(ARRIVE_A, ARRIVE_A), ["step 2 (arrive A)", "already live"]),
    "decode with nothing pending": (
        steps(ARRIVE_A, ADMIT_A, 'op = "decode"\nid = "A"'),
        ["step 3 (decode A)", "no pending token"],
    ),
    "preempting a waiting request": (
        steps(ARRIVE_A, 'op = "preempt"\nid = "A"'),
        ["step 2 (preempt A)", "only a running request"],
    ),
    "admitting a fully computed request": (
        steps(ARRIVE_A, ADMIT_A, ADMIT_A),
        ["step 3 (admit A)", "nothing left to compute"],
    ),
    "sample on a waiting request": (
        steps(ARRIVE_A, 'op = "sample"\nid = "A"\ntokens = "1"'),
        ["step 2 (sample A)", "must be running"],
    ),
    "a bare integer for sampled tokens": (
        steps(ARRIVE_A, ADMIT_A, 'op = "sample"\nid = "A"\ntokens = 7'),
        ["step 3 (sample A)", "tokens", "bare integer"],
    ),
    "image outside the prompt": (
        steps(ARRIVE_A + '\nmm = [{id = "img", offset = 8, length = 4}]'),
        ["step 1 (arrive A)", "mm", "outside the 10-token prompt"],
    ),
    "overlapping images": (
        steps(ARRIVE_A + '\nmm = [{id = "a", offset = 0, length = 4}, {id = "b", offset = 2, length = 2}]'),
        ["mm", "overlaps"],
    ),
    "LoRA with two paths": (
        steps(
            ARRIVE_A + '\nlora = "x"\nlora_path = "p1"',
            'op = "arrive"\nid = "B"\nprompt = "0:4"\nlora = "x"\nlora_path = "p2"',
        ),
        ["step 2 (arrive B)", "lora_path", "already has path"],
    ),
    "empty LoRA path": (steps(ARRIVE_A + '\nlora = "x"\nlora_path = ""'), ["lora_path", "must not be empty"]),
    "unknown engine key": ("[engine]\nblocks = 3\n", ["engine", "unknown key 'blocks'"]),
    "unknown hash algorithm": ('[engine]\nhash_algo = "md5"\n', ["engine.hash_algo", "md5"]),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_is_one_line_exit_2(tmp_path: Path, case: str) -> None:
    text, words = BAD[case]
    path = write(tmp_path, text)
    proc = run(path, "--json")
    assert proc.returncode == 2, (case, proc.stdout, proc.stderr)
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert str(path) in lines[0] or "s.toml" in lines[0]  # names the file
    for w in words:
        assert w in lines[0], (case, lines[0])


def test_file_that_is_not_text(tmp_path: Path) -> None:
    p = tmp_path / "img.toml"
    p.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    proc = run(p)
    assert proc.returncode == 2 and "not a text file" in proc.stderr and proc.stdout == ""


def test_missing_file_and_directory(tmp_path: Path) -> None:
    assert "no such file" in run(tmp_path / "nope.toml").stderr
    proc = run(tmp_path)
    assert proc.returncode == 2 and "is a directory" in proc.stderr


def test_failed_expect_lists_every_failure_prints_json_exit_1(tmp_path: Path) -> None:
    text = steps(
        ARRIVE_A,
        ADMIT_A + "\nexpect = { hit_tokens = 4, new_block_ids = [7] }",
        'op = "finish"\nid = "A"\nexpect = { num_free_blocks = 1 }',
    )
    proc = run(write(tmp_path, text), "--json")
    assert proc.returncode == 1
    out = json.loads(proc.stdout)
    assert [s["op"] for s in out["steps"]] == ["arrive", "admit", "finish"]
    failures = [line for line in proc.stderr.splitlines() if line.startswith("expect failed")]
    assert len(failures) == 3
    assert "expected hit_tokens = 4, got 0" in failures[0]
    assert "expected new_block_ids = [7], got [1, 2, 3]" in failures[1]
    assert "expected num_free_blocks = 1, got 7" in failures[2]


def test_text_form_has_one_line_per_step(tmp_path: Path) -> None:
    proc = run(write(tmp_path, steps(ARRIVE_A, ADMIT_A, 'op = "finish"\nid = "A"')))
    assert proc.returncode == 0
    body = [line for line in proc.stdout.splitlines() if line[:4].strip().rstrip(".").isdigit()]
    assert len(body) == 3
    assert "new blocks [1-3]" in body[1] and "cached [1-2]" in body[1]
    assert "freed [3] to the queue front" in body[2] and "freed [2-1] to the queue back" in body[2]


def test_chunked_admit_then_continue_without_lookup() -> None:
    """`tokens = N` admits N tokens after the hit; a later admit continues with no lookup."""
    sc = parse_scenario_text(steps(ARRIVE_A, ADMIT_A + "\ntokens = 4", ADMIT_A))
    t = replay(sc)
    first, second = t.steps[1], t.steps[2]
    assert first.new_block_ids == (1,) and t.snapshot_at(2).request("A").num_computed_tokens == 4
    assert second.hit_tokens == 0 and second.last(Lookup) is None and second.new_block_ids == (2, 3)
    assert t.final.stats["requests"] == 1  # stats recorded once, at the first admission


def test_generate_leaves_the_last_token_pending() -> None:
    sc = parse_scenario_text(steps(ARRIVE_A, ADMIT_A, 'op = "generate"\nid = "A"\ntokens = "5*3"'))
    req = replay(sc).final.request("A")
    assert req.num_tokens == 13 and req.num_computed_tokens == 12


def test_failed_admission_changes_nothing() -> None:
    sc = parse_scenario_text(
        HEAD + '\n[[steps]]\nop = "arrive"\nid = "A"\nprompt = "0:40"\n'
        '\n[[steps]]\nop = "admit"\nid = "A"\nexpect = { ok = false, hit_tokens = 0, new_block_ids = [] }\n'
    )
    t = replay(sc)
    assert not t.expect_failures
    assert t.snapshot_at(2) == t.snapshot_at(1)


def test_id_reused_after_finish() -> None:
    sc = parse_scenario_text(steps(ARRIVE_A, ADMIT_A, 'op = "finish"\nid = "A"', ARRIVE_A, ADMIT_A))
    assert replay(sc).steps[-1].hit_tokens == 8  # (10 - 1) // 4 blocks of the first A


def test_reset_running_preempts_in_reverse_order_of_becoming_running() -> None:
    b = 'op = "arrive"\nid = "B"\nprompt = "100:104"'
    sc = parse_scenario_text(steps(ARRIVE_A, b, 'op = "admit"\nid = "B"', ADMIT_A, 'op = "reset"\nrunning = true'))
    t = replay(sc)
    last = t.steps[-1]
    assert last.preempted == ("A", "B") and last.ok
    assert [r.status for r in t.final.requests] == ["preempted", "preempted"]


def test_caching_off_has_no_hashes_and_null_seed() -> None:
    sc = parse_scenario_text("[engine]\nenable_prefix_caching = false\n[[steps]]\n" + ARRIVE_A)
    out = replay(sc).to_json()
    assert out["final"]["none_hash"] is None and out["final"]["hash_seed"] is None
    assert out["final"]["requests"]["A"]["block_hashes"] == []


def test_xxhash_seed_is_reported_and_reproduces() -> None:
    sc = parse_scenario_text('[engine]\nhash_algo = "xxhash"\n[[steps]]\n' + 'op = "arrive"\nid = "A"\nprompt = "0:32"')
    t1 = replay(sc)
    assert len(t1.hash_seed) == 64
    assert replay(sc, hash_seed=t1.hash_seed).to_json() == t1.to_json()
    assert replay(sc).hash_seed != t1.hash_seed  # drawn anew, as vLLM does per process


def test_scenario_round_trips_through_toml() -> None:
    sc = parse_scenario_text(
        steps(ARRIVE_A + '\ncache_salt = "t1"\nmm = [{id = "i", offset = 2, length = 3}]', ADMIT_A + "\ntokens = 4")
    )
    again = parse_scenario_text(scenario_to_toml(sc))
    assert replay(again).to_json() == replay(sc).to_json()


def test_spec_length_is_checked_before_expansion() -> None:
    with pytest.raises(BadInput, match="max_model_len"):
        parse_scenario_text('[[steps]]\nop = "arrive"\nid = "A"\nprompt = "0*2000000000"')
