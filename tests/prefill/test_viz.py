"""The sweep figure is built from plain measurement dicts, without Streamlit or torch."""

from __future__ import annotations

import pathlib
import sys

import pytest

pytest.importorskip("plotly")
from explorer.viz.prefill import sweep_figure


def point(prompt: int, hit: int, full: float, cached: float, flop_ideal: float, **extra) -> dict:
    return {
        "prompt_tokens": prompt,
        "hit_tokens": hit,
        "full_ms": full,
        "cached_ms": cached,
        "saved_fraction": 1 - cached / full,
        "flop_ideal_fraction": flop_ideal,
        **extra,
    }


def test_sweep_figure_traces():
    pts = [
        point(200, 0, 10.0, 10.0, 0.0),
        point(200, 96, 10.4, 6.0, 0.4),
        point(200, 192, 9.6, 1.0, 0.9),
        point(100, 64, 5.0, 2.0, 0.6),
    ]
    fig = sweep_figure(pts, title="t")
    names = [t.name for t in fig.data]
    assert names == [
        "100 tokens: measured, cached",
        "100 tokens: FLOP estimate",
        "100 tokens: measured, full",
        "200 tokens: measured, cached",
        "200 tokens: FLOP estimate",
        "200 tokens: measured, full",
    ]
    cached200, ideal200, full200 = fig.data[3:6]
    assert list(cached200.x) == [0, 96, 192] and list(cached200.y) == [10.0, 6.0, 1.0]
    assert list(full200.y) == [10.0, 10.0]  # the median of the points' full times
    assert list(ideal200.y) == pytest.approx([10.0, 6.0, 1.0])


def test_absolute_estimate_trace_when_given():
    fig = sweep_figure([point(50, 0, 2.0, 2.0, 0.0, estimate_ms=1.0), point(50, 32, 2.0, 1.0, 0.6, estimate_ms=0.4)])
    assert fig.data[-1].name == "50 tokens: peak x utilisation estimate"


def test_no_streamlit_import():
    assert "explorer.viz.prefill" in sys.modules
    src = pathlib.Path(sys.modules["explorer.viz.prefill"].__file__).read_text()
    assert "import streamlit" not in src and "from streamlit" not in src
