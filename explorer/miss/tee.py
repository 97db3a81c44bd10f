"""One observer slot, several listeners: the core reports once, each listener hears it."""

from __future__ import annotations

from typing import Any

from explorer.core.kv_cache_observer import KVCacheObserver


def _forward(name: str) -> Any:
    def call(self: ObserverTee, *args: Any) -> None:
        for listener in self.listeners:
            getattr(listener, name)(*args)

    call.__name__ = name
    return call


class ObserverTee(KVCacheObserver):
    """Passes every report to each listener in order (the panels' recorder, the miss reasons)."""

    def __init__(self, *listeners: KVCacheObserver) -> None:
        self.listeners = listeners
        self.block_reports = any(x.block_reports for x in listeners)


for _name in dir(KVCacheObserver):
    if _name.startswith("on_"):
        setattr(ObserverTee, _name, _forward(_name))


def observer_of(*listeners: KVCacheObserver | None) -> KVCacheObserver | None:
    """The observer for these listeners: none, the only one, or a tee."""
    present = [x for x in listeners if x is not None]
    if not present:
        return None
    return present[0] if len(present) == 1 else ObserverTee(*present)
