"""What explain returns: a phase panel (title, citations, sentences, a few words for the phase
strip) and the NOW line of a step."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from explorer.view.explain.refs import Ref

if TYPE_CHECKING:
    from explorer.scenario.trace import Trace

PANEL_TITLES = {
    "hashing": "Hashing",
    "lookup": "Lookup",
    "allocate": "Touch, then allocate",
    "caching": "Caching",
    "free": "Free",
    "eviction": "Eviction",
}
PANEL_ORDER = ("hashing", "lookup", "allocate", "caching", "free", "eviction")


@dataclass(frozen=True)
class Panel:
    key: str  # one of PANEL_ORDER
    number: int  # 1..6
    title: str
    refs: tuple[Ref, ...]
    sentences: tuple[str, ...]
    summary: str  # a few words for the phase strip

    @property
    def text(self) -> str:
        return " ".join(self.sentences)


@dataclass(frozen=True)
class Now:
    headline: str  # "admit B1"
    refs: tuple[Ref, ...]
    sentences: tuple[str, ...]

    @property
    def text(self) -> str:
        return " ".join(self.sentences)


def panels_in_order(builders: Mapping[str, Callable[[Trace, int], Panel | None]], trace: Trace, k: int) -> list[Panel]:
    """The panels of step k (1-based) in PANEL_ORDER, each built by ``builders[key]``; only those
    whose phase happened in the step (a builder returns None otherwise)."""
    if k <= 0:
        return []
    return [p for key in PANEL_ORDER if (p := builders[key](trace, k)) is not None]
