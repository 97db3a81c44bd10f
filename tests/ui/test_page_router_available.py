"""The router page shows achieved against available per routing policy (AppTest): the sentence
is the one the simulation's own numbers give, and the summary table carries both rates."""

from __future__ import annotations

from explorer.router.simulate import simulate
from explorer.viz.router_available import gap_sentence
from tests.ui.test_page_router import SMALL, page


def test_the_page_puts_achieved_beside_available():
    at = page(SMALL)
    want = gap_sentence(simulate(SMALL))
    shown = [m.value.replace("\\", "").replace("\u2060", "") for m in at.markdown]
    assert want in shown
    rows = [t for t in at.table if "available hit rate (every cache pooled)" in str(t.value)]
    assert rows, "the summary table has the available hit rate"
