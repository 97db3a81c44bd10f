"""The router page under AppTest: renders, switches change the outcome, bad input is an error,
and the numbers shown are the engines' own stats."""

from __future__ import annotations

from dataclasses import replace

import pytest
from streamlit.testing.v1 import AppTest

from explorer.router.config import POLICIES, POLICY_LABELS, FleetConfig, FleetSpec, WorkloadSpec
from explorer.router.fleet_file import example_fleets, load_fleet, parse_fleet_text
from explorer.router.share import decode_share, encode_share
from explorer.router.simulate import simulate
from tests.ui.helpers import plain

TIMEOUT = 120

# A small fleet keeps each script run well under a second of simulation.
SMALL = FleetConfig(
    title="small test fleet",
    fleet=FleetSpec(instances=3, num_blocks=600),
    workload=WorkloadSpec(
        seed=3,
        requests=50,
        tenants=2,
        system_prompts=3,
        system_prompt_tokens=(200, 400),
        user_tokens=(20, 120),
        output_tokens=(20, 80),
        turns=(2, 6),
    ),
)


def _app():
    # Streamlit runs a page file as a script: its module-level render() call draws the page.
    import runpy

    runpy.run_module("explorer.ui.pages.router", run_name="__main__")


def page(cfg: FleetConfig | None = SMALL, token: str | None = None) -> AppTest:
    at = AppTest.from_function(_app, default_timeout=TIMEOUT)
    if cfg is not None or token is not None:
        at.query_params["fleet"] = token if token is not None else encode_share(cfg)
    at.run()
    assert not at.exception, at.exception
    return at


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def test_default_page_renders_the_first_example_fleet():
    at = page(cfg=None)
    assert not at.error
    assert at.selectbox(key="router_preset").value == next(iter(example_fleets()))
    assert set(metrics(at)) == {"prefix-aware", "round robin", "least loaded"}
    assert at.success and "Hit rate: prefix-aware" in plain(at.success[0].value)
    # the share link is in the address
    assert decode_share(at.query_params["fleet"]).fleet == FleetConfig().fleet


def test_shared_link_loads_the_setup_and_numbers_are_the_engines_stats():
    at = page()
    assert at.number_input(key="router_instances").value == 3
    assert at.number_input(key="router_requests").value == 50
    expected = simulate(SMALL).runs
    shown = metrics(at)
    for p, run in expected.items():
        assert shown[POLICY_LABELS[p]] == f"{run.hit_rate:.1%}"
    # the per-instance table shows each engine's PrefixCacheStats totals
    table = next(df.value for df in at.dataframe if "hits (stats)" in df.value.columns)
    assert list(table["hits (stats)"]) == [i.stats["hits"] for i in expected["prefix"].instances]
    assert list(table["queries (stats)"]) == [i.stats["queries"] for i in expected["prefix"].instances]
    # the summary: a column per policy, a row per figure (it wraps at 1024 px)
    summary = next(t.value for t in at.table if "hit tokens (prefill saved)" in list(t.value.iloc[:, 0]))
    row = list(summary.iloc[:, 0]).index("hit tokens (prefill saved)")
    assert [summary[POLICY_LABELS[p]].iloc[row] for p in POLICIES] == [f"{expected[p].hits:,}" for p in POLICIES]


@pytest.mark.parametrize(
    ("switch", "name"),
    [
        ("router_f_algo", "router hash algo"),
        ("router_f_form", "router wrong hash form"),
        ("router_f_xxhash", "xxhash unshared seed"),
    ],
)
def test_a_switch_breaks_the_router(switch, name):
    at = page()
    before = metrics(at)["prefix-aware"]
    at.toggle(key=switch).set_value(True).run()
    assert not at.exception
    warnings = [plain(w.value) for w in at.warning]
    assert any(name in w and "matched 0 tokens" in w for w in warnings), warnings
    shown = metrics(at)
    assert shown["prefix-aware"] != before
    assert shown["prefix-aware, no failures"] == before  # the healthy run, side by side
    # the link now carries the switch
    assert decode_share(at.query_params["fleet"]).failures.active


def test_salt_switch_and_lost_events():
    at = page()
    at.toggle(key="router_f_salt").set_value(True).run()
    assert any("0 hit tokens crossed tenants" in plain(w.value) for w in at.warning)
    at.toggle(key="router_f_salt").set_value(False).run()
    at.slider(key="router_f_drop").set_value(0.3).run()
    assert not at.exception
    assert any("batches were lost" in plain(w.value) for w in at.warning)
    table = next(df.value for df in at.dataframe if "gaps" in df.value.columns and "phantom" in df.value.columns)
    assert table["gaps"].sum() > 0


def test_load_weight_and_tie_break_change_the_routing():
    at = page()
    rows = lambda: next(df.value for df in at.dataframe if "hits (stats)" in df.value.columns)  # noqa: E731
    before = list(rows()["routed"])
    at.slider(key="router_load_weight").set_value(0.0).run()
    at.selectbox(key="router_tie_break").set_value("lowest_index").run()
    assert not at.exception
    assert list(rows()["routed"]) != before


def test_bad_config_is_an_error():
    at = page()
    at.text_area(key="router_toml").set_value("[fleet]\ninstances = 0\n").run()
    assert not at.exception
    assert [plain(e.value) for e in at.error] == ["fleet file: [fleet] instances: expected an integer in 1..16, got 0"]
    assert not at.metric
    at.text_area(key="router_toml").set_value("[fleet\n").run()
    assert "not valid TOML" in plain(at.error[0].value)


def test_bad_link_is_an_error_and_the_page_still_works():
    at = page(cfg=None, token="v1.not-a-fleet")
    assert any("shared link could not be loaded" in plain(e.value) for e in at.error)
    assert at.metric  # the default fleet ran


def test_preset_loads_its_file():
    at = page()
    name = list(example_fleets())[1]
    at.selectbox(key="router_preset").set_value(name).run()
    assert not at.exception
    cfg = parse_fleet_text(at.text_area(key="router_toml").value)
    assert cfg == replace(load_fleet(example_fleets()[name]), source="<fleet>")
    assert at.toggle(key="router_f_salt").value == cfg.failures.tenant_salt


def test_ask_the_router():
    at = page()
    at.text_input(key="router_ask").set_value("0:100").run()
    assert not at.exception
    assert any("The router picks" in m.value for m in at.markdown)
    at.text_input(key="router_ask").set_value("x:y").run()
    assert at.error
