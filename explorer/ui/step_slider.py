"""The control bar's step slider: a native range input in a small component.

Streamlit's slider is bound to the view (explorer/ui/bound.py), so each Next gave it a new key
and the browser built a new one, measuring its track as it mounted: about 20 ms of each step.
This one stays mounted and moves its thumb to the step the page sends. It reports only what the
user does, as a one-shot trigger when the thumb is let go (or moved with the keyboard): a report
is never a stale value or a default, so nothing has to be told apart from one.
"""

from __future__ import annotations

from collections.abc import Callable

import streamlit as st

COMPONENT = "px_step_slider"
KEY = "px_step"  # its session-state key: a trigger result with ``.step`` after a move

_JS = """
export default function ({ data, parentElement, setTriggerValue }) {
  let input = parentElement.querySelector('input.px-range');
  let label = parentElement.querySelector('.px-range-label');
  if (!input) {
    parentElement.innerHTML =
      '<div class="px-range-label"></div><input class="px-range" type="range" min="0" step="1">';
    input = parentElement.querySelector('input.px-range');
    label = parentElement.querySelector('.px-range-label');
  }
  const max = Number(data.max) || 0;
  input.max = String(max);
  input.setAttribute('aria-label', data.label);
  input.title = data.help;
  if (!input.__pxMoving) input.value = String(data.value);
  label.textContent = data.label;
  label.hidden = !data.show_label;
  const onInput = () => {
    input.__pxMoving = true;
    label.textContent = 'Step ' + input.value + ' of ' + max;
  };
  const onChange = () => {
    input.__pxMoving = false;
    setTriggerValue('step', Number(input.value));
  };
  input.addEventListener('input', onInput);
  input.addEventListener('change', onChange);
  return () => {
    input.removeEventListener('input', onInput);
    input.removeEventListener('change', onChange);
  };
}
"""


@st.cache_resource
def _component():
    return st.components.v2.component(COMPONENT, js=_JS, isolate_styles=False)


def step_slider(step: int, n: int, show_label: bool, on_step: Callable[[], None]) -> None:
    """The slider at ``step`` of ``n``; ``on_step`` runs when the user moved it (read
    ``moved_to()`` there)."""
    _component()(
        data={
            "value": step,
            "max": n,
            "label": f"Step {step} of {n}",
            "show_label": show_label,
            "help": "0 = before the first step. Keys: Left and Right arrows.",
        },
        key=KEY,
        on_step_change=on_step,
        width="stretch",
    )


def moved_to() -> int | None:
    """The step the user moved the slider to, in its callback; None if it reported nothing usable."""
    res = st.session_state.get(KEY)
    value = res.get("step") if isinstance(res, dict) else getattr(res, "step", None)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None
