"""vLLM's SpecDecoding metrics line after the main log line (design section 11): its numbers,
its interval, the CLI and the Explorer's metrics panel."""

from __future__ import annotations

from explorer.cli import main
from explorer.core.sched.output import SpecDecodingStats
from explorer.metrics.log_line import LoggingStatLogger, SpecDecodingLogging
from explorer.metrics.replay import recorder_at
from explorer.scenario.engine import replay
from explorer.scenario.parse import load_scenario
from tests.metrics.helpers import LESSON, REPO

SPEC_GOLDEN = REPO / "tests/scenario/golden/engine_steps/eagle_drafts_sync.toml"


def drafts(k: int, *accepted_and_drafted: tuple[int, int]) -> SpecDecodingStats:
    stats = SpecDecodingStats.new(k)
    for accepted, drafted in accepted_and_drafted:
        stats.observe_draft(drafted, accepted)
    return stats


def test_the_line_sums_the_updates_since_it_was_last_logged():
    now = [0.0]
    log = SpecDecodingLogging(lambda: now[0])
    assert log.log() is None  # no drafts verified: no line
    log.observe(drafts(3, (3, 3), (0, 3)))  # two requests: all accepted, none accepted
    log.observe(drafts(3, (1, 3)))
    now[0] = 4.0
    assert log.log() == (
        "SpecDecoding metrics: Mean acceptance length: 2.33, Accepted throughput: 1.00 tokens/s, "
        "Drafted throughput: 2.25 tokens/s, Accepted: 4 tokens, Drafted: 9 tokens, "
        "Per-position acceptance rate: 0.667, 0.333, 0.333, Avg Draft acceptance rate: 44.4%"
    )
    now[0] = 6.0
    assert log.log() is None  # emptied by the line; the interval starts again at 4 s
    log.observe(drafts(3, (2, 3)))
    now[0] = 8.0
    assert "Accepted throughput: 0.50 tokens/s, Drafted throughput: 0.75 tokens/s" in (log.log() or "")


def test_the_logger_logs_it_after_the_main_line_only_with_drafts():
    rec = recorder_at(replay(load_scenario(SPEC_GOLDEN), record=False))
    line = rec.log()
    assert line.spec_decoding is not None and line.spec_decoding.startswith("SpecDecoding metrics: ")
    assert line.lines == [line.text, line.spec_decoding]
    plain = LoggingStatLogger(lambda: 1.0).log()
    assert plain.spec_decoding is None and plain.lines == [plain.text]


def test_metrics_prints_the_spec_decoding_line_after_the_log_line(capsys):
    assert main(["metrics", str(SPEC_GOLDEN)]) == 0
    *_, main_line, spec_line = capsys.readouterr().out.rstrip("\n").split("\n")
    assert main_line.startswith("Engine 000: ")
    assert spec_line.startswith("SpecDecoding metrics: Mean acceptance length: ")
    assert main(["metrics", str(LESSON)]) == 0
    assert "SpecDecoding" not in capsys.readouterr().out


def test_the_metrics_panel_shows_both_lines():
    from markupsafe import escape

    from explorer.view.stage_state import exported_metrics_html

    trace = replay(load_scenario(SPEC_GOLDEN), record=False)
    line = recorder_at(trace, len(trace.steps)).log()
    assert line.spec_decoding is not None
    body = str(exported_metrics_html(trace, len(trace.steps), 5))
    assert escape(f"{line.level} {line.text}\n{line.level} {line.spec_decoding}") in body
