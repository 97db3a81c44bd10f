"""The "What a hit saves" page, driven by AppTest on the tiny model."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest

from tests.ui.helpers import page

PREFILL_PAGE = "explorer/ui/pages/prefill.py"


def _page() -> AppTest:
    import torch

    torch.set_num_threads(1)
    at = page(PREFILL_PAGE, timeout=120)
    return at.run()


def test_estimate_shows_without_measuring():
    at = _page()
    assert not at.exception
    text = " ".join(m.value for m in at.markdown)
    assert "What a hit saves" in " ".join(t.value for t in at.title)
    assert "FLOPs" in text and "walkthrough" in text
    assert any("32.5 us" in str(t.value) for t in at.table)


def test_measure_tiny_then_sweep():
    pytest.importorskip("torch")
    at = _page()
    at.selectbox(key="pf_model").select("tiny")
    at.selectbox(key="pf_device").select("cpu")
    at.number_input(key="pf_prompt").set_value(100)
    at.number_input(key="pf_hit").set_value(64)
    at.number_input(key="pf_repeats").set_value(1)
    at.button(key="pf_go").click()
    at.run()
    assert not at.exception and not at.error
    success = " ".join(s.value for s in at.success)
    assert "tiny" in success and "cpu" in success and "float32" in success and "random" in success
    labels = [m.label for m in at.metric]
    assert "Full prefill" in labels and "Cached prefill" in labels and "Saved" in labels
    assert "match" in " ".join(m.value for m in at.markdown)

    at.multiselect(key="pf_sweep_prompts").set_value([100, 256])
    at.number_input(key="pf_sweep_points").set_value(3)
    at.button(key="pf_sweep_go").click()
    at.run()
    assert not at.exception and not at.error
    charts = at.get("plotly_chart")
    assert len(charts) == 1
    fig = json.loads(charts[0].proto.spec)
    names = [t["name"] for t in fig["data"]]
    assert "100 tokens: measured, cached" in names and "256 tokens: FLOP estimate" in names


def test_bad_hit_is_an_error_not_a_traceback():
    at = _page()
    at.number_input(key="pf_prompt").set_value(100)
    at.number_input(key="pf_hit").set_value(40)
    at.run()
    assert not at.exception
    assert "multiple of the block size" in at.error[0].value


NO_TORCH = """
import json, sys
sys.modules["torch"] = None  # as if torch were not installed
from tests.ui.helpers import page

at = page("explorer/ui/pages/prefill.py").run()
print(json.dumps({
    "exception": [str(e.value) for e in at.exception],
    "info": [i.value for i in at.info],
    "buttons": [b.label for b in at.button],
    "tables": len(at.table),
}))
"""


def test_without_torch_the_estimate_still_shows():
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    p = subprocess.run([sys.executable, "-c", NO_TORCH], cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["exception"] == []
    assert any("torch is not installed" in i for i in out["info"])
    assert "Measure" not in out["buttons"] and out["tables"] == 1


def test_measure_runs_again_when_pressed_and_shows_the_spread(monkeypatch):
    pytest.importorskip("torch")
    import explorer.prefill.cli as prefill_cli

    calls = []
    real = prefill_cli.run_measurement

    def counted(*a, **k):
        calls.append(a)
        return real(*a, **k)

    monkeypatch.setattr(prefill_cli, "run_measurement", counted)
    at = _page()
    at.selectbox(key="pf_model").select("tiny")
    at.selectbox(key="pf_device").select("cpu")
    at.number_input(key="pf_prompt").set_value(100)
    at.number_input(key="pf_hit").set_value(64)
    at.number_input(key="pf_repeats").set_value(2)
    at.button(key="pf_go").click().run()
    at.button(key="pf_go").click().run()
    assert not at.exception and not at.error
    assert len(calls) == 2, "the second press measured again"
    assert "measurement 2 of this session" in " ".join(s.value for s in at.success)
    assert any("2 timed runs each: full" in c.value and "spread" in c.value for c in at.caption)
    at.run()  # a rerun without a press does not measure
    assert len(calls) == 2


def test_the_sweep_keeps_its_prompt_lengths_when_the_prompt_changes():
    at = _page()
    at.number_input(key="pf_prompt").set_value(100).run()
    at.multiselect(key="pf_sweep_prompts").set_value([100, 256]).run()
    at.number_input(key="pf_prompt").set_value(120).run()
    assert not at.exception
    assert list(at.multiselect(key="pf_sweep_prompts").value) == [100, 256]
    assert (
        120 in at.multiselect(key="pf_sweep_prompts").options or "120" in at.multiselect(key="pf_sweep_prompts").options
    )


def test_a_busy_machine_is_said_so():
    from explorer.ui.pages.prefill import spread_note

    calm = {"full_runs_ms": [10.0, 10.2, 10.1], "cached_runs_ms": [5.0, 5.1, 5.0], "load": 0.3, "cores": 2}
    text, warn = spread_note(calm)
    assert warn is None and "full 10.0 to 10.2 ms (spread 2%)" in text
    _, warn = spread_note({**calm, "load": 3.5})
    assert warn and "load average 3.5 on 2 cores" in warn
    _, warn = spread_note({**calm, "cached_runs_ms": [5.0, 9.0, 5.2]})
    assert warn and "spread widely" in warn
