"""The engine-step playground (issue 24 item 5): its settings in the link (round trip, one message
per bad parameter, the parser's own checks and caps), and the page under AppTest: change the
scheduler and the budget, arrive a request and step, and the replay follows."""

from __future__ import annotations

from typing import Any

import pytest
from streamlit.testing.v1 import AppTest

from explorer.errors import BadInput
from explorer.scenario.step_spec import MAX_BUDGET
from explorer.ui.state import ViewState, build, check_engine, from_query, to_query
from explorer.ui.step_settings import BLANK_ENGINE, check_step_setting
from tests.ui.helpers import bound, explorer, now_text, plain

LESSON = "14_engine_step"
ARRIVE = {"op": "arrive", "id": "A", "prompt": "0:100", "output": "9000:9004"}


def _view(at: AppTest) -> ViewState:
    return at.session_state["px_view"]


def _errors(at: AppTest) -> list[str]:
    return [plain(e.value) for e in at.error]


@pytest.mark.parametrize(
    "engine",
    [
        {"scheduler": "sync", "max_num_batched_tokens": 256, "max_num_seqs": 8, "long_prefill_token_threshold": 32},
        {"kv_connector": {"kind": "offloading", "cpu_blocks": 40, "failure_policy": "fail"}},
        {"kv_connector": {"kind": "static", "load": "sync", "failure_policy": "recompute"}},
        {"kv_connector": None, "scheduler": "async", "block_size": 8},
    ],
)
def test_the_settings_and_edits_travel_in_the_link(engine: dict[str, Any]) -> None:
    view = ViewState(lesson=LESSON, engine=check_engine(engine), edits=(ARRIVE, {"op": "step"}), step=3)
    q, warnings = to_query(view)
    assert not warnings
    back, errors = from_query(q)
    assert not errors, errors
    assert back == view
    # and what the link opens replays under those settings
    sc, _ = build(back)
    for key in ("scheduler", "max_num_batched_tokens", "max_num_seqs", "long_prefill_token_threshold"):
        if key in engine:
            assert sc.sched is not None and getattr(sc.sched, key) == engine[key]
    if "kv_connector" in engine:
        want = engine["kv_connector"]
        assert (sc.connector.as_dict() if sc.connector else None) == want


def test_each_bad_parameter_gets_one_message_and_the_rest_is_kept() -> None:
    q = {"lesson": LESSON, "sched": "fast", "mnbt": "0", "mns": "12", "lpt": "-3", "kv": "offloading"}
    view, errors = from_query(q)
    assert view.engine == {"max_num_seqs": 12}
    assert len(errors) == 4, errors
    joined = "\n".join(errors)
    for short in ("sched='fast'", "mnbt='0'", "lpt='-3'", "kv='offloading'"):
        assert joined.count(short) == 1, (short, errors)
    assert 'expected "async" or "sync"' in joined  # the parser's own message
    assert all("Traceback" not in e for e in errors)


def test_caps_and_the_parsers_checks_hold_for_the_link() -> None:
    _, errors = from_query({"lesson": LESSON, "mnbt": str(MAX_BUDGET + 1)})
    assert len(errors) == 1 and f"{MAX_BUDGET:,}" in errors[0]
    _, errors = from_query({"lesson": LESSON, "kv": "offloading:99999999"})
    assert len(errors) == 1 and "cpu_blocks" in errors[0]
    _, errors = from_query({"lesson": LESSON, "kv": "static:later"})
    assert len(errors) == 1 and "load" in errors[0]
    with pytest.raises(BadInput):
        check_step_setting("scheduler", "batch")
    # the combination is the parser's: a budget below the batch size is refused with its message
    view, errors = from_query({"lesson": BLANK_ENGINE, "mnbt": "8", "mns": "16"})
    assert not errors
    with pytest.raises(BadInput, match="below max_num_seqs"):
        build(view)


def test_the_empty_engine_replays_the_playgrounds_ops() -> None:
    view = ViewState(lesson=BLANK_ENGINE, edits=(ARRIVE, {"op": "step"}, {"op": "step"}))
    sc, rep = build(view)
    assert sc.sched is not None and rep.error is None
    assert len(rep.trace.steps) == 4  # its idle step, then the playground's three
    assert rep.trace.steps[2].to_json()["scheduled"] == {"A": 100}


def test_the_page_edits_an_engine_step_scenario_and_replays_at_once() -> None:
    at = explorer(query={"lesson": LESSON})
    assert not _errors(at), _errors(at)
    own = build(_view(at))[0]
    assert own.sched is not None and own.sched.scheduler == "sync"
    bound(at, "radio", "px_w_sched").set_value("async").run()
    bound(at, "number_input", "px_w_mnbt").set_value(256).run()
    assert not _errors(at), _errors(at)
    v = _view(at)
    assert v.engine == {"scheduler": "async", "max_num_batched_tokens": 256}
    sc, rep = build(v)
    assert sc.sched is not None and sc.sched.scheduler == "async" and sc.sched.max_num_batched_tokens == 256
    at.text_input(key="px_e_id").set_value("Z")
    at.text_input(key="px_e_prompt").set_value("0:48")
    at.text_input(key="px_e_output").set_value("9000:9003")
    at.button(key="FormSubmitter:px_step_arrive-Arrive").click().run()
    at.button(key="px_b_step").click().run()
    assert not _errors(at), _errors(at)
    v = _view(at)
    assert [e["op"] for e in v.edits] == ["arrive", "step"]
    n = len(own.ops) + 2
    assert f"Step {n} of {n}" in now_text(at)
    _, rep = build(v)
    assert "Z" in rep.trace.steps[-1].to_json()["scheduled"]
    q, _ = to_query(v)
    assert q["sched"] == "async" and q["mnbt"] == "256" and "ed" in q


def test_a_bad_setting_from_the_page_is_one_message_and_the_connector_can_be_set() -> None:
    at = explorer(query={"lesson": BLANK_ENGINE})
    assert not _errors(at), _errors(at)
    bound(at, "selectbox", "px_w_kv").set_value("static").run()
    assert _view(at).engine == {"kv_connector": {"kind": "static", "failure_policy": "fail", "load": "async"}}
    at.text_input(key="px_e_id").set_value("E")
    at.text_input(key="px_e_prompt").set_value("0:64")
    at.text_input(key="px_e_output").set_value("7:9")
    at.number_input(key="px_e_ext").set_value(32)
    at.button(key="FormSubmitter:px_step_arrive-Arrive").click().run()
    assert not _errors(at), _errors(at)
    assert _view(at).edits[-1]["external_tokens"] == 32
    # external tokens beyond the prompt: the parser's one message, the view unchanged
    before = _view(at)
    at.text_input(key="px_e_id").set_value("F")
    at.text_input(key="px_e_prompt").set_value("0:16")
    at.number_input(key="px_e_ext").set_value(48)
    at.button(key="FormSubmitter:px_step_arrive-Arrive").click().run()
    errs = _errors(at)
    assert len(errs) == 1 and "external_tokens" in errs[0] and "beyond the 16-token prompt" in errs[0], errs
    assert _view(at).edits == before.edits


def test_a_setting_the_scenario_refuses_is_one_message_and_the_view_stays() -> None:
    at = explorer(query={"lesson": LESSON})  # max_num_seqs = 4
    bound(at, "number_input", "px_w_mnbt").set_value(3).run()
    errs = _errors(at)
    assert len(errs) == 1 and "3 is below max_num_seqs = 4" in errs[0], errs
    assert _view(at).engine == {}
    sc, _ = build(_view(at))
    assert sc.sched is not None and sc.sched.max_num_batched_tokens == 64  # the lesson's own
