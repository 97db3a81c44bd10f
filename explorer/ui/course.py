"""The course (lessons/course/course.toml): two routes through the lessons for a class, and each
lesson's objective, duration and the lessons it builds on. Read by the Lessons page."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from explorer.errors import BadInput
from explorer.toml_read import loads_toml
from explorer.ui.lesson_files import LESSONS_DIR

COURSE_FILE = LESSONS_DIR / "course" / "course.toml"  # beside the lessons, not one of them


@dataclass(frozen=True)
class CourseLesson:
    stem: str
    objective: str
    minutes: int
    builds_on: tuple[str, ...]


@dataclass(frozen=True)
class Route:
    name: str
    title: str
    minutes: int
    lessons: tuple[str, ...]


@dataclass(frozen=True)
class Course:
    lessons: dict[str, CourseLesson]
    routes: tuple[Route, ...]

    def route_minutes(self, route: Route) -> int:
        return sum(self.lessons[s].minutes for s in route.lessons)


def load_course(path: Path = COURSE_FILE) -> Course:
    """The course file, checked: every route names lessons the file describes."""
    raw = loads_toml(path.read_text(encoding="utf-8"), str(path))
    try:
        lessons = {
            stem: CourseLesson(stem, str(v["objective"]), int(v["minutes"]), tuple(v.get("builds_on", ())))
            for stem, v in raw["lessons"].items()
        }
        routes = tuple(
            Route(str(r["name"]), str(r["title"]), int(r["minutes"]), tuple(r["lessons"])) for r in raw["routes"]
        )
    except (KeyError, TypeError, ValueError) as e:
        raise BadInput(f"{path.name}: {e}") from None
    for r in routes:
        missing = [s for s in r.lessons if s not in lessons]
        if missing:
            raise BadInput(f"{path.name}: route {r.name} names lessons it does not describe: {missing}")
    return Course(lessons, routes)
