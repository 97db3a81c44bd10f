"""The live events page under AppTest: status, bad endpoints, the allow-list, a live stream."""

from __future__ import annotations

import time

import pytest
from streamlit.testing.v1 import AppTest

from explorer.core.events import KVEventBatch
from explorer.errors import BadInput
from explorer.events.publisher import KVEventPublisher
from explorer.ui.live_view import SESSION, allowed_hosts, parse_endpoints
from tests.events.helpers import LOOPBACK, free_port, removed, stored
from tests.ui.helpers import plain

TIMEOUT = 30


def _app():
    from explorer.ui.pages.live import render

    render()


def fresh() -> AppTest:
    at = AppTest.from_function(_app, default_timeout=TIMEOUT)
    at.run()
    assert not at.exception
    return at


def connect(at: AppTest, endpoints: str, bind: bool = False) -> AppTest:
    at.text_area(key="live_endpoints").set_value(endpoints)
    at.checkbox(key="live_bind").set_value(bind)
    at.button(key="live_connect").click()
    at.run()
    assert not at.exception
    return at


def stop(at: AppTest) -> None:
    sess = at.session_state.get(SESSION, None)
    if sess is not None:
        sess.stop()
        assert not sess.alive


def texts(at: AppTest) -> str:
    parts = [
        plain(e.value)
        for kind in ("error", "warning", "info", "success", "markdown", "caption")
        for e in getattr(at, kind)
    ]
    return "\n".join(str(p) for p in parts)


def test_initial_page_says_not_connected():
    at = fresh()
    assert any("Not connected" in i.value for i in at.info)
    assert not at.error


@pytest.mark.parametrize(
    "endpoints, fragment",
    [
        ("nonsense", "expected tcp://HOST:PORT"),
        ("tcp://127.0.0.1:99999", "port must be"),
        ("tcp://10.1.2.3:5557", "EXPLORER_LIVE_ALLOW_HOSTS"),
        ("tcp://*:5557", "every interface"),
        ("inproc://x", "inside one process"),
        ("", "no endpoint"),
        ("tcp://127.0.0.1:1 tcp://127.0.0.1:2 extra", "expected ENDPOINT"),
    ],
)
def test_bad_endpoints_show_an_error_and_start_nothing(endpoints, fragment):
    at = connect(fresh(), endpoints)
    assert at.error and fragment in plain(at.error[0].value)
    assert at.session_state[SESSION] is None if SESSION in at.session_state else True


def test_allow_list_from_env_or_flag():
    assert allowed_hosts({}, []) == frozenset()
    assert allowed_hosts({"EXPLORER_LIVE_ALLOW_HOSTS": "10.1.2.3, Box.Lan"}, []) == {"10.1.2.3", "box.lan"}
    assert allowed_hosts({}, ["app.py", "--live-allow-hosts", "a,[fe80::1]"]) == {"a", "fe80::1"}
    assert allowed_hosts({}, ["--live-allow-hosts=*"]) == {"*"}
    allow = frozenset({"10.1.2.3", "*"})
    specs = parse_endpoints("tcp://10.1.2.3:5557 tcp://10.1.2.3:5558\n# comment\ntcp://*:6000", allow)
    assert [(s.endpoint, s.replay_endpoint) for s in specs] == [
        ("tcp://10.1.2.3:5557", "tcp://10.1.2.3:5558"),
        ("tcp://*:6000", None),
    ]
    for ok in ("tcp://localhost:1", "tcp://127.0.0.2:1", "tcp://[::1]:1", "ipc:///run/kv.sock"):
        parse_endpoints(ok, frozenset())
    with pytest.raises(BadInput, match="twice"):
        parse_endpoints("tcp://127.0.0.1:1\ntcp://127.0.0.1:1", frozenset())
    with pytest.raises(BadInput, match="replay endpoint"):
        parse_endpoints("tcp://127.0.0.1:1 tcp://10.0.0.1:2", frozenset())


def test_dead_endpoint_is_a_clear_status_not_a_hang():
    at = connect(fresh(), f"tcp://{LOOPBACK}:{free_port()}")
    try:
        deadline = time.monotonic() + 15
        status = ""
        while time.monotonic() < deadline:
            t0 = time.monotonic()
            at.run()
            assert time.monotonic() - t0 < 10  # a rerun never blocks on the socket
            status = texts(at)
            if "retrying" in status or "nothing received" in status:
                break
            time.sleep(0.3)
        assert "retrying" in status or "nothing received" in status, status
        assert at.error or at.warning
    finally:
        stop(at)


def _removal_seen(sess) -> bool:
    snaps = sess.snapshot()
    if not snaps or not snaps[0].instances:
        return False
    hashes = dict(snaps[0].instances[0].hashes)
    return hashes.get("13", 0) == hashes.get("12", 0) - 1


def test_bound_page_shows_batches_counters_and_the_multiset():
    port = free_port()
    at = connect(fresh(), f"tcp://{LOOPBACK}:{port}", bind=True)
    try:
        with KVEventPublisher(f"tcp://{LOOPBACK}:{port}", topic="vllm-a") as pub:
            deadline = time.monotonic() + 15
            sess = at.session_state[SESSION]
            while time.monotonic() < deadline:
                snaps = sess.snapshot()
                if snaps and snaps[0].summary.get("batches"):
                    break
                pub.publish(KVEventBatch(time.time(), [stored(11, 12, 13), stored(11)]))
                time.sleep(0.1)
            pub.publish(KVEventBatch(time.time(), [removed(13)]))
            # One connection keeps the order: once the removal is in, so is every batch before it.
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and not _removal_seen(sess):
                time.sleep(0.05)
        at.run()
        assert not at.exception
        page = texts(at)
        assert "receiving" in page, page
        metrics = {m.label: m.value for m in at.metric}
        assert int(metrics["batches"].replace(",", "")) >= 2
        assert metrics["malformed"] == "0" and metrics["restarts"] == "0"
        assert "instance topic vllm-a, data parallel rank 0" in "\n".join(plain(e.label) for e in at.expander)
        snap = sess.snapshot()[0]
        (inst,) = snap.instances
        n = snap.summary["batches"] - 1  # the warm-up batches, then one removal
        # A hash whose count falls to 0 leaves the multiset (13 after a single warm-up batch).
        expected = {"11": 2 * n, "12": n, "13": n - 1}
        assert dict(inst.hashes) == {h: c for h, c in expected.items() if c}
        # The longest chain is 11 -> 12 -> 13, or 11 -> 12 once 13 has left (a single warm-up batch).
        depth = 3 if n > 1 else 2
        assert inst.prefixes[0][0] == depth and inst.duplicates == inst.blocks - depth
        at.button(key="live_stop").click().run()
        assert not at.exception and at.session_state[SESSION] is None
        assert not sess.alive
    finally:
        stop(at)


def test_a_port_in_use_is_an_error_status():
    port = free_port()
    first = connect(fresh(), f"tcp://{LOOPBACK}:{port}", bind=True)
    try:
        second = connect(fresh(), f"tcp://{LOOPBACK}:{port}", bind=True)
        try:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and not second.error:
                time.sleep(0.2)
                second.run()
            assert second.error and "in use" in plain(second.error[0].value)
        finally:
            stop(second)
    finally:
        stop(first)
