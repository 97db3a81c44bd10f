"""Practice questions: generated from seeds, answered by the replay, explained from its records."""

from __future__ import annotations

import pytest

from explorer.practice.generate import generate, kind_for_seed
from explorer.practice.hit_value import hit_value_rows, load_measurements, max_hit_for
from explorer.practice.hits import q_mistake
from explorer.practice.interview import FOLLOW_UPS, MISTAKES, RUBRIC
from explorer.practice.question import KINDS, Score, format_answer, parse_answer
from explorer.scenario.engine import replay
from explorer.scenario.records import AdmissionCheck, CachedBlock, GroupLookup, Lookup
from explorer.scenario.write import scenario_to_toml
from tests.step_records import evictions

SEEDS = range(25)


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_generates_and_its_answer_is_the_replay(kind):
    for seed in SEEDS:
        q = generate(seed, kind)
        trace = replay(q.scenario)
        step = trace.steps[q.step_index]
        truth = {
            "hit_length": step.hit_tokens,
            "mistake": step.hit_tokens,
            "eagle_hit": step.hit_tokens,
            "hybrid_hit": step.hit_tokens,
            "next_evicted": next((b for b, _ in evictions(step)), None),
            "free_queue": list(trace.snapshot_at(q.step_index + 1).free_queue),
            "hashed_this_step": [c.block_id for c in step.of(CachedBlock)],
            "admission": step.ok,
            # the connector's allocation for A, and the hashes this step's BlockStored events carry
            "external_hit": (step.engine_step.external or {}).get("A") if step.engine_step else None,
            "async_load_events": sum(len(e.block_hashes) for e in step.events if type(e).__name__ == "BlockStored"),
            # the lookup's miss record: the reason of the block the question names
            "why_miss": (
                step.miss.block_reasons[q.block]
                if step.miss is not None and q.block is not None and q.block < len(step.miss.block_reasons)
                else "partial_block"
            ),
        }[kind]
        assert q.answer == truth, (kind, seed)
        assert q.explanation and q.setup is not None and q.state and q.asked
        right = format_answer(q.answer_format, q.answer).replace(" tokens", "")
        assert q.check(right).correct, (kind, seed, right)
        assert q.check(q.answer if q.answer_format == "bool" else right).correct


def test_same_seed_same_question_and_the_seed_picks_the_kind():
    a, b = generate(4242), generate(4242)
    assert (a.kind, a.answer, a.setup, a.asked) == (b.kind, b.answer, b.setup, b.asked)
    assert scenario_to_toml(a.scenario) == scenario_to_toml(b.scenario)
    assert len({kind_for_seed(s) for s in range(60)}) == len(KINDS)


def test_wrong_answers_are_wrong_and_unreadable_ones_say_so():
    q = generate(3, "hit_length")
    assert not q.check(str(q.answer + 16)).correct
    v = q.check("lots")
    assert not v.correct and v.given is None and "Could not read" in v.message
    fq = generate(3, "free_queue")
    assert not fq.check(", ".join(map(str, reversed(fq.answer)))).correct or fq.answer == list(reversed(fq.answer))


def test_both_outcomes_occur():
    admitted = {generate(s, "admission").answer for s in range(30)}
    assert admitted == {True, False}
    evicted = {generate(s, "next_evicted").answer is None for s in range(30)}
    assert evicted == {True, False}
    cached = {bool(generate(s, "hashed_this_step").answer) for s in range(30)}
    assert cached == {True, False}


def test_refused_admissions_include_the_free_hit_trap():
    traps = 0
    for s in range(40):
        q = generate(s, "admission")
        a = q.asked_step().of(AdmissionCheck)[0]
        assert a.ok == (a.num_required_blocks <= a.num_free_blocks)
        if not a.ok and a.num_new_blocks <= a.num_free_blocks:
            traps += 1
            assert any("would wrongly say yes" in line for line in q.explanation)
    assert traps >= 3


@pytest.mark.parametrize("mistake", MISTAKES, ids=lambda m: m.name)
def test_each_common_mistake_gives_the_wrong_number(mistake):
    for seed in range(8):
        q = q_mistake(seed, mistake.name)
        assert q.mistaken_answer != q.answer
        if mistake.name in ("partial_block", "identical_100"):
            assert q.answer < q.mistaken_answer  # the hit is less than the mistaken answer
        if mistake.name == "lora":
            assert q.answer == 0
        if mistake.name == "freed_on_finish":
            assert q.answer > 0


def test_answer_parsing():
    assert parse_answer("int", "1,184") == 1184
    assert parse_answer("ids", "[4, 5 3]") == [4, 5, 3]
    assert parse_answer("ids", "none") == [] == parse_answer("ids", "")
    assert parse_answer("ids", "5–8 2, 1") == [5, 6, 7, 8, 2, 1] and parse_answer("ids", "3-1") == [3, 2, 1]
    assert parse_answer("block", "Block 7") == 7 and parse_answer("block", "none") is None
    assert parse_answer("bool", "Yes") is True and parse_answer("bool", False) is False
    for fmt, bad in (("int", "-3"), ("ids", "4, x"), ("block", "4 5"), ("bool", "maybe")):
        with pytest.raises(ValueError):
            parse_answer(fmt, bad)


def test_score_counts_each_question_once():
    s = Score()
    assert s.record("a:1", True) and not s.record("a:1", False)
    s.record("a:2", False)
    assert (s.answered, s.correct, s.text) == (2, 1, "1 / 2")
    assert Score().answered == 0  # no state shared between sessions


def test_follow_ups_rubric_and_value_of_a_hit():
    assert len(FOLLOW_UPS) == 3 and [r.level for r in RUBRIC] == ["Weak", "Hire", "Strong hire"]
    rows = {r.label: r.dense_only for r in hit_value_rows(8.03e9, 989e12, 0.5, 1200, 992)}
    assert list(rows.values()) == ["32.5 µs", "39.0 ms", "6.8 ms", "32.2 ms", "83%"]
    assert max_hit_for(1200) == 1184 and max_hit_for(4096) == 4080


def test_measurements_are_read_from_json(tmp_path):
    rec = {
        "model": "tiny",
        "device": "cpu",
        "prompt_tokens": 1200,
        "hit_tokens": 992,
        "full_ms": 10.0,
        "cached_ms": 2.0,
    }
    (tmp_path / "prefill.json").write_text(__import__("json").dumps({"runs": [rec, {"x": 1}]}))
    (tmp_path / "broken.json").write_text("{")
    found = load_measurements(tmp_path)
    assert len(found) == 1 and found[0]["source"] == "prefill.json"
    assert load_measurements(tmp_path / "missing") == []


def test_the_checked_in_measurements_are_the_readmes_and_the_prefill_docs():
    """One source: docs/prefill_cpu.json holds the CPU runs; the README's row and docs/prefill.md's
    table state the figures computed from it (the practice page shows the same file)."""
    import statistics
    from pathlib import Path

    from explorer.practice.hit_value import measured_summary

    root = Path(__file__).resolve().parents[2]
    runs = [m for m in load_measurements(root / "docs") if m["source"] == "prefill_cpu.json"]
    assert len(runs) == 4
    for m in runs:
        assert abs(m["saved_fraction"] - (1 - m["cached_ms"] / m["full_ms"])) < 1e-4
    saved = statistics.median(m["saved_fraction"] for m in runs)
    ideal = runs[0]["flop_ideal_fraction"]
    readme = (root / "README.md").read_text(encoding="utf-8")
    row = next(line for line in readme.splitlines() if "prefill_cpu.json" in line)
    assert f"saved {saved:.1%} (median of {len(runs)})" in row
    assert f"**{saved / ideal:.0%} of the FLOP ideal** ({ideal:.1%})" in row
    summary = measured_summary(runs)
    assert summary is not None and f"saved {saved:.1%} (median of 4)" in summary
    doc = (root / "docs" / "prefill.md").read_text(encoding="utf-8")
    for m in runs:
        assert f"| {m['full_ms']:,} ms | {m['cached_ms']:,} ms | {m['saved_fraction']:.1%} |" in doc


@pytest.mark.parametrize("seed", range(40))
def test_every_question_shows_its_inputs(seed):
    """Each arrival says how its prompt relates to the earlier ones and names its extra keys,
    and the pool size is stated, so the answer follows from what is shown."""
    q = generate(seed)
    arrivals = [line for line in q.setup if ". arrive " in line]
    if q.asked.split(" ", 2)[1:2] == ["arrives:"]:
        arrivals.append(q.asked)
    for line in arrivals:
        assert "extra keys:" in line, line
        assert (" = " in line and "'s " in line) or "first request" in line or "shares no leading token" in line, line
    assert any(s.startswith("Pool: ") and " blocks (block 0 is the null block" in s for s in q.state)


def test_a_later_chunk_is_shown_as_continue_not_admit():
    seen = 0
    for seed in range(300):
        q = generate(seed)
        steps = q.scenario.ops
        for line, op in zip(q.setup, steps):
            if op.op == "admit" and line.split(". ", 1)[1].startswith("continue "):
                seen += 1
        if q.asked.startswith("continue "):
            seen += 1
            assert "no lookup" in q.asked
    assert seen > 0, "no practice scenario continued a chunk: the check would be vacuous"


def test_the_eagle_hit_is_the_walk_less_its_last_block():
    drops = 0
    for seed in range(30):
        q = generate(seed, "eagle_hit")
        step = q.asked_step()
        matched = sum(1 for p in step.last(Lookup).probes if p[1])
        bs = q.scenario.engine.block_size
        assert q.answer == max(matched - 1, 0) * bs, seed
        assert q.scenario.speculative is not None and q.lesson == "17_speculative_decoding"
        if matched:
            drops += 1
            assert any("EAGLE drops the last" in line for line in q.explanation)
    assert drops >= 15


def test_the_hybrid_hit_is_the_fixed_point_every_group_accepts():
    differ = 0
    for seed in range(30):
        q = generate(seed, "hybrid_hit")
        step = q.asked_step()
        (gl,) = [g for g in step.of(GroupLookup) if g.request_id == "B"]
        assert q.answer == gl.hit_tokens <= min(gl.group_hit_tokens), seed
        assert q.scenario.groups is not None and q.lesson == "16_sliding_window"
        assert any(f"settles after {gl.num_passes} pass" in line for line in q.explanation)
        differ += len(set(gl.group_hit_tokens)) > 1
    assert differ > 0, "no question where the groups disagree: the fixed point would go untested"
