"""Lessons: pick one, read it, open its scenario in the explorer.

A lesson is lessons/NN_slug.md (the narrative) plus lessons/NN_slug.toml (the scenario it
replays; each step's `note` shows beside its panel in the explorer). The explorer page opens a
lesson from the URL parameter `lesson` (the file stem).
"""

from __future__ import annotations

import streamlit as st

from explorer.errors import BadInput
from explorer.scenario.parse import load_scenario
from explorer.ui import bound
from explorer.ui.address import follow
from explorer.ui.classroom import browser_base_url, join_box
from explorer.ui.course import Course, load_course
from explorer.ui.explorer_session import open_link_params
from explorer.ui.lesson_files import ENGINE_STEPS, MANAGER_OPS, LessonFile, list_lessons
from explorer.ui.text import error, esc, md

K_PICK = "lessons_pick"  # the lesson shown (its stem)
W_PICK = "lessons_w_pick"  # the picker, bound to K_PICK (explorer.ui.bound)
K_LAST_URL = "lessons_last_url_pick"
# Other pages, by the paths app.py registers them under.
EXPLORER_PAGE = "explorer/ui/pages/explorer.py"
PRACTICE_PAGE = "explorer/ui/pages/practice.py"


def _initial_pick(stems: list[str]) -> str:
    for key in ("lesson", "scenario"):
        v = st.query_params.get(key)
        if v in stems:
            return v
    return stems[0]


def _url_names_lesson() -> bool:
    return any(st.query_params.get(k) for k in ("lesson", "scenario"))


def _steps_table(lesson: LessonFile) -> None:
    try:
        scenario = load_scenario(lesson.toml)
    except BadInput as e:
        error(f"This lesson's scenario does not load: {e}")
        return
    rows: dict[str, list[int | str]] = {"step": [], "op": [], "note": [], "checks": []}
    for op in scenario.ops:
        rows["step"].append(op.index + 1)
        rows["op"].append(f"{op.op} {op.id or ''}".strip())
        rows["note"].append(op.note or "")
        rows["checks"].append(
            ", ".join(f"{k} = {v}" for k, v in op.expect.items() if k not in ("new_block_ids", "free_queue"))
            + (" (+ block ids)" if {"new_block_ids", "free_queue"} & set(op.expect) else "")
        )
    st.dataframe(rows, hide_index=True, width="stretch")


_KIND_TEXT = {
    MANAGER_OPS: "Each step is one KV cache manager call for one request: you play the scheduler.",
    ENGINE_STEPS: "Each step is one engine step of vLLM's scheduler: a batch within the token budget.",
}


def _on_pick(k: str) -> None:
    if bound.is_current(W_PICK, k) and st.session_state.get(k) is not None:
        st.session_state[K_PICK] = st.session_state[k]


def _course(by_stem: dict[str, LessonFile]) -> Course | None:
    try:
        course = load_course()
    except (OSError, BadInput) as e:
        error(f"The course file does not load: {e}")
        return None
    with st.expander("The course: a 45-minute and a 90-minute route", key="lessons_x_course"):
        for route in course.routes:
            st.markdown(f"**{md(route.title)}** ({course.route_minutes(route)} minutes)")
            rows: dict[str, list[str | int]] = {"#": [], "lesson": [], "objective": [], "minutes": [], "builds on": []}
            for i, stem in enumerate(route.lessons, start=1):
                c = course.lessons[stem]
                rows["#"].append(i)
                rows["lesson"].append(by_stem[stem].title if stem in by_stem else stem)
                rows["objective"].append(c.objective)
                rows["minutes"].append(c.minutes)
                rows["builds on"].append(", ".join(b[:2] for b in c.builds_on) or "-")
            st.dataframe(rows, hide_index=True, width="stretch", key=f"lessons_route_{route.name}")
    return course


def render() -> None:
    st.title("Lessons")
    lessons = list_lessons()
    if not lessons:
        st.info("No lessons found.")
        return
    by_stem = {lesson.stem: lesson for lesson in lessons}
    stems = list(by_stem)
    wanted = _initial_pick(stems)
    if st.session_state.get(K_PICK) not in by_stem or (
        wanted != st.session_state.get(K_LAST_URL) and _url_names_lesson()
    ):
        # A link that names a lesson (from the practice page, say) wins over the last pick.
        st.session_state[K_PICK] = wanted
        st.session_state[K_LAST_URL] = wanted

    with st.sidebar:
        k = bound.key(W_PICK, st.session_state[K_PICK])
        st.radio(
            "Lesson",
            stems,
            index=stems.index(st.session_state[K_PICK]),
            key=k,
            on_change=_on_pick,
            args=(k,),
            format_func=lambda s: f"{by_stem[s].title} · {by_stem[s].kind}",
        )
        with st.expander("Class address: a QR code for the room", key="lessons_x_join"):
            base = browser_base_url()
            join_box(f"{base}?lesson={st.session_state[K_PICK]}" if base else None)
    lesson = by_stem[st.session_state[K_PICK]]
    course = _course(by_stem)

    st.page_link(
        EXPLORER_PAGE,
        label="Open this lesson in the explorer",
        icon=":material/play_circle:",
        query_params=open_link_params(lesson=lesson.stem, scenario=lesson.stem),
    )
    st.html(
        f'<div class="px-lesson-kind" data-px-lesson-kind="{esc(lesson.kind)}">Kind: <b>{esc(lesson.kind)}</b>. '
        + esc(_KIND_TEXT.get(lesson.kind, ""))
        + "</div>"
    )
    if course is not None and lesson.stem in course.lessons:
        c = course.lessons[lesson.stem]
        after = ", ".join(by_stem[b].title if b in by_stem else b for b in c.builds_on)
        st.html(
            f'<div class="px-lesson-objective"><b>Objective:</b> {esc(c.objective)} '
            f"<span>· {c.minutes} minutes{' · builds on ' + esc(after) if after else ''}</span></div>"
        )
    st.markdown(lesson.md.read_text(encoding="utf-8"))
    with st.expander("The scenario's steps, notes and checks"):
        st.caption(
            f"lessons/{lesson.toml.name}: replay it with `python -m explorer run lessons/{lesson.toml.name}` "
            "(exit 0 when every check holds)."
        )
        _steps_table(lesson)

    i = stems.index(lesson.stem)
    c1, c2, c3 = st.columns(3)
    if i > 0:
        c1.button(
            f"← {by_stem[stems[i - 1]].title}",
            key="lessons_prev",
            on_click=lambda: st.session_state.__setitem__(K_PICK, stems[i - 1]),
        )
    c2.page_link(PRACTICE_PAGE, label="Practise: predict before you see", icon=":material/quiz:")
    if i + 1 < len(stems):
        c3.button(
            f"{by_stem[stems[i + 1]].title} →",
            key="lessons_next",
            on_click=lambda: st.session_state.__setitem__(K_PICK, stems[i + 1]),
        )
    # The address names the lesson shown, so a copied address opens this lesson, not the first one.
    st.session_state[K_LAST_URL] = lesson.stem
    follow({"lesson": lesson.stem})


# Streamlit runs a page file as __main__; importing it (a test calling render()) draws nothing.
if __name__ == "__main__":
    render()
