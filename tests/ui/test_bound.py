"""Widgets bound to the view (explorer.ui.bound): the app never writes a widget's value; when the
view moves, the widget gets a new key, created with the view's value, so a browser that rebuilds
it from its default shows the view, and a late report for the old key is ignored."""

from __future__ import annotations

from explorer.ui import bound
from explorer.ui.lesson_files import lesson_title
from explorer.ui.state import ViewState
from tests.ui.helpers import bound as widget
from tests.ui.helpers import explorer, now_text, stage_data, step_to, view


def test_a_new_value_gets_a_new_key_and_the_old_one_is_stale():
    ss: dict = {}
    k0 = bound.key("w", 3, ss)
    assert k0 == "w__0" and bound.is_current("w", k0, ss)
    ss[k0] = 3  # the widget was drawn and holds 3
    assert bound.key("w", 3, ss) == k0  # the same value: the same widget
    ss[k0] = 5  # the user moved it to 5 and the view followed
    assert bound.key("w", 5, ss) == k0
    k1 = bound.key("w", 6, ss)  # the app moved the view: a new widget holding 6
    assert k1 == "w__1" and not bound.is_current("w", k0, ss) and bound.is_current("w", k1, ss)
    assert bound.key("x", 1, ss) == "x__0"  # each widget has its own generation


def _defaults(at):
    """What the browser would rebuild each bound widget with: its default in the page's protos
    (the picker shows lesson titles)."""
    return {
        "bs": widget(at, "number_input", "px_w_bs").proto.default,
        "nb": widget(at, "number_input", "px_w_nb").proto.default,
        "pc": widget(at, "toggle", "px_w_pc").proto.default,
        "lesson": widget(at, "selectbox", "px_w_lesson").proto.options[
            widget(at, "selectbox", "px_w_lesson").proto.default
        ],
    }


def test_every_bound_widget_defaults_to_the_view_after_the_app_moved_it():
    at = explorer(query={"lesson": "04_touch_then_allocate", "bs": "8", "nb": "12", "pc": "0"})
    assert _defaults(at) == {
        "bs": 8,
        "nb": 12,
        "pc": False,
        "lesson": lesson_title("04_touch_then_allocate"),
    }
    for k in (1, 2, 3):  # the browser's steps run nothing here; a link to step k reruns
        at = step_to(at, k)
        assert view(at).step == k and stage_data(at)["step"] == k and len(stage_data(at)["steps"]) == 15
    widget(at, "selectbox", "px_w_lesson").set_value("00_two_chat_turns").run()
    assert view(at) == ViewState(lesson="00_two_chat_turns")
    assert _defaults(at) == {"bs": 16, "nb": 300, "pc": True, "lesson": lesson_title("00_two_chat_turns")}
    assert stage_data(at)["step"] == 0 and "Step 0 of 20" in now_text(at)


def test_a_user_change_keeps_the_widget_and_moves_the_view():
    at = explorer()
    k = widget(at, "number_input", "px_w_bs").key
    widget(at, "number_input", "px_w_bs").set_value(32).run()
    assert view(at).engine == {"block_size": 32}
    assert widget(at, "number_input", "px_w_bs").key == k  # the browser's widget stays
