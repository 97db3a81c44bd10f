"""Every step of every lesson in presenter mode, at 1280x720 and 1920x1080, in a real browser:
the step's sentence and the lesson note are whole on the screen (issue "the classroom", item 2).

The stage draws each step in the browser (explorer/ui/static/stage.js), so one script walks a
lesson: it measures the NOW box (the headline, the sentence and the lesson note) and every box
inside it, presses Next, and measures again. A box is clipped when its content is wider or
taller than the box (scrollWidth/scrollHeight past clientWidth/clientHeight) or when it ends
below the screen.
"""

from __future__ import annotations

import pytest

from explorer.ui.state import list_lessons
from tests.e2e.conftest import open_tab, settle_layout, wait_idle

pytestmark = pytest.mark.e2e

SIZES = [(1280, 720), (1920, 1080)]

# Walks the lesson from the step on screen to the last; returns the clipped boxes it met.
WALK_JS = """() => {
  const out = [];
  const next = document.querySelector('.px-b-next');
  for (let guard = 0; guard < 1000; guard++) {
    const now = document.querySelector('.px-pres-now');
    const step = now ? now.querySelector('.px-now').dataset.pxNow : '?';
    if (!now) { out.push({step, what: 'no NOW box'}); break; }
    for (const e of [now, ...now.querySelectorAll('*')]) {
      const style = getComputedStyle(e);
      const clips = e === now || style.overflowX !== 'visible' || style.overflowY !== 'visible';
      if (clips && (e.scrollHeight > e.clientHeight + 1 || e.scrollWidth > e.clientWidth + 1)) {
        out.push({step, what: e.className || e.tagName, sh: e.scrollHeight, ch: e.clientHeight,
                  sw: e.scrollWidth, cw: e.clientWidth, text: e.innerText.slice(-80)});
      }
    }
    const r = now.getBoundingClientRect();
    if (r.bottom > window.innerHeight + 1) {
      out.push({step, what: 'below the screen', bottom: r.bottom, height: window.innerHeight});
    }
    if (next.disabled) break;
    next.click();
  }
  return out;
}"""


@pytest.fixture(scope="module")
def walks(px_tabs, px_app_url) -> dict[tuple[int, int], tuple[int, dict[str, list[dict]]]]:
    """Every lesson walked at both sizes from one load: lesson i opens at one size and, walked,
    goes back to its first step and is walked again in the window resized to the other (odd
    lessons open at the larger size), so each size is met both on opening and on a resize, as
    a presenter who goes full screen after opening meets it. Per size: (steps walked, the
    clipped boxes by lesson)."""
    out: dict[tuple[int, int], tuple[int, dict[str, list[dict]]]] = {size: (0, {}) for size in SIZES}
    w, h = SIZES[0]
    with open_tab(px_tabs, w, h) as page:
        for i, lesson in enumerate(list_lessons()):
            order = SIZES if i % 2 == 0 else SIZES[::-1]
            w, h = order[0]
            page.set_viewport_size({"width": w, "height": h})
            page.goto(f"{px_app_url}/?lesson={lesson}&presenter=1")
            page.locator(".px-pres-now").first.wait_for(timeout=90_000)
            wait_idle(page)
            for j, size in enumerate(order):
                if j:
                    page.set_viewport_size({"width": size[0], "height": size[1]})
                    settle_layout(page)  # the resize's layout and the stage's refit are done
                    page.locator(".px-b-first").first.click()
                    settle_layout(page)
                found = page.evaluate(WALK_JS)
                walked, clipped = out[size]
                walked += int(page.locator(".px-now").first.get_attribute("data-px-now") or 0)
                if found:
                    clipped[lesson] = found[:3]
                out[size] = (walked, clipped)
    return out


@pytest.mark.parametrize("size", SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
def test_every_lesson_step_is_whole_on_one_presenter_screen(walks, size):
    w, h = size
    walked, clipped = walks[size]
    assert walked > 100, walked  # every lesson walked to its last step
    assert clipped == {}, f"clipped at {w}x{h}: {clipped}"
