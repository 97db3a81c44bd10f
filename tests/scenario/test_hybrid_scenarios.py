"""Hybrid KV cache groups in scenarios (design section 8): the engine keys, the replay JSON's
hybrid fields, `expect`, bad input. The conformance tier proves the numbers against vLLM."""

from __future__ import annotations

from pathlib import Path

import pytest

from explorer.scenario.engine import replay
from explorer.scenario.parse import parse_scenario_text
from explorer.scenario.records import GroupLookup
from explorer.scenario.write import scenario_to_toml
from tests.scenario.test_parse_and_run import run, write

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "scenario" / "golden"

FA_SWA = 'kv_cache_groups = [{ kind = "full_attention" }, { kind = "sliding_window", sliding_window = 32 }]\n'


def scenario(engine: str, *tables: str) -> str:
    return "[engine]\nnum_blocks = 64\n" + engine + "".join(f"\n[[steps]]\n{t}\n" for t in tables)


ARRIVE = 'op = "arrive"\nid = "A"\nprompt = "0:100"'
ADMIT = 'op = "admit"\nid = "A"'

BAD = {
    "window zero": (
        'kv_cache_groups = [{ kind = "full_attention" }, { kind = "sliding_window", sliding_window = 0 }]\n',
        ["engine.kv_cache_groups[1].sliding_window", "positive integer"],
    ),
    "window not an integer": (
        'kv_cache_groups = [{ kind = "sliding_window", sliding_window = "32" }]\n',
        ["sliding_window", "positive integer"],
    ),
    "window true": ('kv_cache_groups = [{ kind = "sliding_window", sliding_window = true }]\n', ["sliding_window"]),
    "window missing": ('kv_cache_groups = [{ kind = "sliding_window" }]\n', ["sliding_window", "missing"]),
    "window on full attention": (
        'kv_cache_groups = [{ kind = "full_attention", sliding_window = 8 }]\n',
        ["sliding_window", "full-attention"],
    ),
    "unknown kind": ('kv_cache_groups = [{ kind = "mamba" }]\n', ["kind", "mamba"]),
    "unknown group key": ('kv_cache_groups = [{ kind = "full_attention", layers = 3 }]\n', ["layers"]),
    "no groups": ("kv_cache_groups = []\n", ["kv_cache_groups", "non-empty"]),
    "group block size not a multiple of hash_block_size": (
        FA_SWA.replace("sliding_window = 32 }", "sliding_window = 32, block_size = 24 }") + "hash_block_size = 16\n",
        ["hash_block_size", "24", "not a multiple"],
    ),
    "hash_block_size zero": (FA_SWA + "hash_block_size = 0\n", ["engine.hash_block_size"]),
    "retention off the scheduler block": (
        FA_SWA + "prefix_cache_retention_interval = 24\n",
        ["prefix_cache_retention_interval", "multiple of the scheduler block size"],
    ),
    "retention without a window": (
        "prefix_cache_retention_interval = 32\n",
        ["prefix_cache_retention_interval", "no sliding-window"],
    ),
    "retention negative": (FA_SWA + "prefix_cache_retention_interval = -16\n", ["prefix_cache_retention_interval"]),
    "retention a word": (FA_SWA + 'prefix_cache_retention_interval = "sparse"\n', ["prefix_cache_retention_interval"]),
    "too many groups": (
        "kv_cache_groups = [" + ", ".join(['{ kind = "full_attention" }'] * 9) + "]\n",
        ["9 groups", "limit"],
    ),
    "scheduler block too large": (
        'kv_cache_groups = [{ kind = "full_attention", block_size = 65536 }, '
        '{ kind = "sliding_window", sliding_window = 8, block_size = 65535 }]\n',
        ["scheduler block size"],
    ),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_hybrid_engine_keys_are_one_line_exit_2(tmp_path: Path, case: str) -> None:
    engine, words = BAD[case]
    path = write(tmp_path, scenario(engine, ARRIVE, ADMIT))
    proc = run(path, "--json")
    assert proc.returncode == 2, (case, proc.stdout, proc.stderr)
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    for w in words:
        assert w in lines[0], (case, lines[0])


BAD_EXPECT = {
    "hybrid expect without groups": ("", ADMIT + "\nexpect = { group_hit_tokens = [0] }", "kv_cache_groups"),
    "group hits not an array": (FA_SWA, ADMIT + "\nexpect = { group_hit_tokens = 0 }", "an array of integers"),
    "boundary not an integer": (FA_SWA, ADMIT + '\nexpect = { shared_prefix_boundary = "0" }', "an integer"),
    "new blocks by group flat": (FA_SWA, ADMIT + "\nexpect = { new_block_ids_by_group = [1, 2] }", "arrays"),
    "decode does not report group hits": (
        FA_SWA,
        'op = "decode"\nid = "A"\nexpect = { group_hit_tokens = [0, 0] }',
        "decode",
    ),
}


@pytest.mark.parametrize("case", list(BAD_EXPECT))
def test_bad_hybrid_expect_is_one_line_exit_2(tmp_path: Path, case: str) -> None:
    engine, step, word = BAD_EXPECT[case]
    proc = run(write(tmp_path, scenario(engine, ARRIVE, step)), "--json")
    assert proc.returncode == 2 and proc.stdout == "", (case, proc.stderr)
    assert len(proc.stderr.strip().splitlines()) == 1 and word in proc.stderr, proc.stderr


def test_hybrid_fields_in_admit_and_final() -> None:
    arrive_b = 'op = "arrive"\nid = "B"\nprompt = "0:100, 1000:1060"'
    sc = parse_scenario_text(
        scenario(FA_SWA, ARRIVE, ADMIT, arrive_b, 'op = "admit"\nid = "B"\ntokens = 16', 'op = "admit"\nid = "B"')
    )
    j = replay(sc).to_json()
    first_b, later_b = j["steps"][3], j["steps"][4]
    assert first_b["group_hit_tokens"] == [96, 96] and first_b["hit_tokens"] == 96
    assert first_b["new_block_ids_by_group"] == [[15], [16]]  # 96 hit + 16 tokens: one block each
    # a later chunk has no lookup: zeros
    assert later_b["group_hit_tokens"] == [0, 0] and later_b["shared_prefix_boundary"] == 0
    final = j["final"]
    assert final["requests"]["B"]["block_ids_by_group"][1][:4] == [0, 0, 0, 0]
    assert set(final["cached_by_group"]) == {"0", "1"}
    assert final["cached"] == final["cached_by_group"]["0"]
    # arrive and decode carry no hybrid fields
    assert "group_hit_tokens" not in j["steps"][0]


def test_failed_admission_gives_an_empty_list_per_group() -> None:
    sc = parse_scenario_text(
        "[engine]\nnum_blocks = 8\n" + FA_SWA + "\n[[steps]]\n" + ARRIVE + "\n\n[[steps]]\n" + ADMIT + "\n"
    )
    step = replay(sc).to_json()["steps"][1]
    assert step["ok"] is False and step["new_block_ids_by_group"] == [[], []] and step["new_block_ids"] == []


def test_one_group_still_reports_the_hybrid_fields() -> None:
    sc = parse_scenario_text(
        scenario('kv_cache_groups = [{ kind = "full_attention" }]\nhash_block_size = 4\n', ARRIVE, ADMIT)
    )
    step = replay(sc).to_json()["steps"][1]
    assert step["group_hit_tokens"] == [0] and step["new_block_ids_by_group"] == [[1, 2, 3, 4, 5, 6, 7]]
    # hash_block_size is ignored with one group, as in vLLM
    assert len(replay(sc).to_json()["final"]["requests"]["A"]["block_hashes"]) == 6


def test_without_groups_nothing_changes() -> None:
    j = replay(parse_scenario_text(scenario("", ARRIVE, ADMIT))).to_json()
    assert "group_hit_tokens" not in j["steps"][1] and "cached_by_group" not in j["final"]
    assert "block_ids_by_group" not in j["final"]["requests"]["A"]


def test_hybrid_scenario_round_trips_through_toml() -> None:
    sc = parse_scenario_text(scenario(FA_SWA + 'prefix_cache_retention_interval = "dense"\n', ARRIVE, ADMIT))
    again = parse_scenario_text(scenario_to_toml(sc))
    assert again.groups == sc.groups
    assert replay(again).to_json() == replay(sc).to_json()


def test_recorded_and_lean_replays_agree() -> None:
    for path in sorted(GOLDEN.glob("hybrid_*.toml")):
        sc = parse_scenario_text(path.read_text(), str(path))
        assert replay(sc).to_json() == replay(sc, record=False).to_json(), path.name


def test_three_groups_golden_settles_in_two_passes() -> None:
    sc = parse_scenario_text((GOLDEN / "hybrid_three_groups.toml").read_text())
    q = replay(sc).steps[-1]
    (lookup,) = q.of(GroupLookup)
    assert lookup.num_passes == 2
    assert [(c.pass_index, c.sliding_window, c.max_length, c.hit_tokens) for c in lookup.calls] == [
        (1, None, 159, 128),
        (1, 64, 128, 80),
        (1, 32, 80, 80),
        (2, 64, 80, 80),
        (2, 32, 80, 80),
    ]


def test_text_output_names_each_groups_hit(tmp_path: Path) -> None:
    proc = run(GOLDEN / "hybrid_rule67_retention0.toml")
    assert proc.returncode == 0, proc.stderr
    line = next(ln for ln in proc.stdout.splitlines() if "admit C" in ln)
    assert "groups hit [128, 96]" in line and "shared prefix 128" in line


def test_snapshots_share_the_group_views_that_did_not_change() -> None:
    sc = parse_scenario_text(scenario(FA_SWA, ARRIVE, ADMIT, 'op = "arrive"\nid = "B"\nprompt = "5000:5010"'))
    trace = replay(sc)
    before, after = trace.snapshot_at(2), trace.snapshot_at(3)  # B's arrival changes no block
    assert after.cached_by_group is before.cached_by_group
    assert after.request("A").block_ids_by_group is before.request("A").block_ids_by_group
