"""One observer slot, several listeners: the core reports once, each listener hears it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from explorer.core.kv_cache_observer import KVCacheObserver

REPORTS = tuple(name for name in dir(KVCacheObserver) if name.startswith("on_"))


def _ignore(*args: Any) -> None:
    """A report that no listener hears."""


def _fan_out(methods: tuple[Callable[..., None], ...]) -> Callable[..., None]:
    def call(*args: Any) -> None:
        for method in methods:
            method(*args)

    return call


class ObserverTee(KVCacheObserver):
    """Passes every report to each listener in order (the panels' recorder, the miss reasons).

    The core reports hundreds of thousands of times in a long replay, so each report is bound
    once, here: to the only listener that hears it (one that keeps the base class's no-op does
    not), to a loop over those that do, or to nothing."""

    def __init__(self, *listeners: KVCacheObserver) -> None:
        self.listeners = listeners
        self.block_reports = any(x.block_reports for x in listeners)
        for name in REPORTS:
            base = getattr(KVCacheObserver, name)
            heard = tuple(getattr(x, name) for x in listeners if getattr(type(x), name) is not base)
            setattr(self, name, heard[0] if len(heard) == 1 else _fan_out(heard) if heard else _ignore)


def observer_of(*listeners: KVCacheObserver | None) -> KVCacheObserver | None:
    """The observer for these listeners: none, the only one, or a tee."""
    present = [x for x in listeners if x is not None]
    if not present:
        return None
    return present[0] if len(present) == 1 else ObserverTee(*present)
