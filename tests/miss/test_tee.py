"""The observer tee: every listener that hears a report gets it, in the listeners' order."""

from __future__ import annotations

from explorer.core.kv_cache_observer import KVCacheObserver
from explorer.miss.tee import ObserverTee, observer_of


class _Pops(KVCacheObserver):
    block_reports = False

    def __init__(self, heard: list[tuple[str, tuple]]) -> None:
        self.heard = heard

    def on_pop(self, block_id, evicted_hash):
        self.heard.append(("pops", (block_id, evicted_hash)))

    def on_request_freed(self, request_id):
        self.heard.append(("pops", (request_id,)))


class _Frees(KVCacheObserver):
    def __init__(self, heard: list[tuple[str, tuple]]) -> None:
        self.heard = heard

    def on_request_freed(self, request_id):
        self.heard.append(("frees", (request_id,)))


def test_each_report_reaches_the_listeners_that_hear_it_in_order():
    heard: list[tuple[str, tuple]] = []
    tee = observer_of(_Pops(heard), None, _Frees(heard))
    assert isinstance(tee, ObserverTee) and tee.block_reports  # _Frees keeps the default
    tee.on_pop(3, b"h")  # one listener
    tee.on_request_freed("r")  # both, in order
    tee.on_touch(3, True)  # neither
    assert heard == [("pops", (3, b"h")), ("pops", ("r",)), ("frees", ("r",))]


def test_none_or_one_listener_needs_no_tee():
    only = _Frees([])
    assert observer_of(None, None) is None and observer_of(None, only) is only
