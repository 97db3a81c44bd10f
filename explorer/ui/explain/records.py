"""What explain returns: a phase panel (title, citations, sentences, a few words for the phase
strip) and the NOW line of a step."""

from __future__ import annotations

from dataclasses import dataclass

from explorer.ui.explain.refs import Ref

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
