"""Page: watch live KV events from running vLLM instances.

Type one or more event endpoints (vLLM's ``--kv-events-config`` ``endpoint`` and, optionally,
its ``replay_endpoint``). The page subscribes with the same decoder and state machine as
``python -m explorer listen`` (`explorer.events`), rebuilds per instance the multiset of
block hashes it holds and its cached prefixes, and counts gaps, replays, losses, restarts and
malformed frames as they happen.

Connect or bind: vLLM's publisher *binds* an endpoint with ``*`` (its default ``tcp://*:5557``),
so the page connects to ``tcp://127.0.0.1:5557``; with ``tcp://HOST:PORT`` vLLM *connects*, so
tick "Bind" and the page listens there.

Which hosts may be typed, and the background thread that holds the sockets: see
`explorer.ui.live_view`. Streamlit runs this file as a page script; `render()` draws the page.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from explorer.errors import BadInput
from explorer.events.instance import DEFAULT_MAX_HASHES
from explorer.ui.live_view import ALLOW_ENV, SESSION, EndpointSnap, LiveSession, allowed_hosts, parse_endpoints
from explorer.ui.text import alert, caption, clean, error, info, label, warning

ERROR = "live_error"
W_ENDPOINTS = "live_endpoints"
W_TOPIC = "live_topic"
W_BIND = "live_bind"
W_CONNECT = "live_connect"
W_STOP = "live_stop"

REFRESH_S = 1.0
QUIET_AFTER_S = 5.0

DEFAULT_ENDPOINTS = "tcp://127.0.0.1:5557"
# What to try when nothing is connected, by the side this page took (connect or bind).
HINT_BIND = "nothing connected: if your publisher connects (endpoint with a host), choose Bind"
HINT_CONNECT = "nothing connected: if your publisher binds (endpoint with * or ::), untick Bind and connect to it"

INTRO = """
Point this page at running vLLM instances started with KV events on, for example
`--kv-events-config '{"enable_kv_cache_events": true, "publisher": "zmq",
"endpoint": "tcp://*:5557", "replay_endpoint": "tcp://*:5558"}'`. One endpoint per line,
optionally followed by its replay endpoint: `tcp://127.0.0.1:5557 tcp://127.0.0.1:5558`.
With a replay endpoint, missed batches are fetched again (vLLM keeps its last 10,000).
Data-parallel ranks publish on consecutive ports (`5557`, `5558`, ...): add a line per rank.
"""


# ---- the page --------------------------------------------------------------------------------------


def _ss() -> Any:
    return st.session_state


def _stop_session() -> None:
    sess = _ss().get(SESSION)
    if sess is not None:
        sess.stop()
    _ss()[SESSION] = None


def _connect() -> None:
    ss = _ss()
    ss[ERROR] = None
    try:
        specs = parse_endpoints(ss.get(W_ENDPOINTS) or "", allowed_hosts())
    except BadInput as e:
        ss[ERROR] = str(e)
        return
    except ValueError as e:  # a check below the page that did not say which line: still one line
        ss[ERROR] = f"not a valid endpoint: {e}"
        return
    _stop_session()
    ss[SESSION] = LiveSession(specs, bool(ss.get(W_BIND)), ss.get(W_TOPIC) or "").start()


def _status_line(snap: EndpointSnap, running: bool) -> tuple[str, str]:
    """(kind, text) for the endpoint's status: kind is success, info, warning or error."""
    if snap.error:
        return "error", snap.error
    conn = snap.connection
    age = snap.last_frame_age
    if age is not None and age < QUIET_AFTER_S:
        return "success", f"{conn}: receiving (last frame {age:.1f} s ago)"
    if not running:
        return "info", f"stopped ({conn})"
    if conn.startswith("retrying"):
        return "error", f"{conn}: {HINT_BIND}; if it binds, is vLLM running at {snap.endpoint} with KV events on?"
    quiet = snap.running_for if age is None else age
    if quiet >= QUIET_AFTER_S:
        if age is None and conn == "connecting":
            return "warning", f"{conn}: {HINT_BIND}."
        if age is None and conn.startswith(("binding", "listening")):
            return "warning", f"{conn}: {HINT_CONNECT}."
        what = "nothing received yet" if age is None else f"no batch for {age:.0f} s"
        return "warning", f"{conn}: {what} (vLLM publishes only when a step changes the cache)"
    return "info", f"{conn}: waiting for batches"


def _render_endpoint(snap: EndpointSnap, running: bool) -> None:
    title = snap.endpoint + (f"  (replay {snap.replay_endpoint})" if snap.replay_endpoint else "")
    st.markdown(f"#### {label(title)}")
    alert(*_status_line(snap, running))
    if snap.error:
        return
    s = snap.summary
    cols = st.columns(6)
    for col, key in zip(cols, ("batches", "gaps", "replayed", "lost", "malformed", "restarts")):
        col.metric(key, f"{s.get(key, 0):,}")
    notes = []
    if snap.replay_status:
        notes.append(f"replay: {snap.replay_status}")
    if snap.pending:
        notes.append(f"{snap.pending} batches held until a replay fills a gap")
    if snap.last_malformed:
        notes.append(f"last malformed frame: {snap.last_malformed}")
    if notes:
        caption(" · ".join(notes))
    for inst in snap.instances:
        name = f"instance topic {inst.topic or '(none)'}, data parallel rank {inst.rank}"
        with st.expander(label(f"{name}: {inst.blocks:,} cached blocks"), expanded=len(snap.instances) == 1):
            c = st.columns(4)
            c[0].metric("blocks held", f"{inst.blocks:,}")
            c[1].metric("distinct hashes", f"{inst.distinct:,}")
            c[2].metric("duplicate copies", f"{inst.duplicates:,}")
            c[3].metric("restarts", inst.counters["restarts"])
            extra = []
            if inst.by_medium:
                extra.append("by medium: " + ", ".join(f"{m} {n:,}" for m, n in sorted(inst.by_medium.items())))
            if inst.counters["unrecovered_initial"]:
                extra.append(
                    f"{inst.counters['unrecovered_initial']} batches before joining were no longer "
                    "in the replay buffer: this view may miss blocks stored before then"
                )
            if inst.counters["unknown_removals"]:
                extra.append(f"{inst.counters['unknown_removals']} removals of hashes not held")
            if inst.counters.get("dropped_hashes"):
                extra.append(
                    f"{inst.counters['dropped_hashes']:,} stored hashes not kept: the listener holds at most "
                    f"{DEFAULT_MAX_HASHES:,} distinct hashes"
                )
            if extra:
                caption(" · ".join(extra))
            left, right = st.columns(2)
            with left:
                st.markdown("**Cached prefixes** (hash chains, longest first)")
                if inst.prefixes:
                    bs = inst.block_size or 0
                    st.dataframe(
                        [
                            {"blocks": n, "tokens": n * bs, "first block": a, "last block": b}
                            for n, a, b in inst.prefixes
                        ],
                        hide_index=True,
                    )
                else:
                    st.caption("none")
            with right:
                st.markdown("**Block hash multiset**")
                if inst.hashes:
                    st.dataframe([{"hash": h, "copies": n} for h, n in inst.hashes], hide_index=True)
                else:
                    st.caption("empty")
    if snap.recent:
        with st.expander("Recent batches", expanded=False):
            st.dataframe(
                [{k: clean(v, 200) if isinstance(v, str) else v for k, v in row.items()} for row in snap.recent],
                hide_index=True,
            )


def _render_live(sess: LiveSession) -> None:
    sess.touch()
    running = sess.alive
    if sess.stopped_reason:
        warning(sess.stopped_reason)
    snaps = sess.snapshot()
    if not snaps:
        info("Opening sockets...")
        return
    for snap in snaps:
        _render_endpoint(snap, running)


def render() -> None:
    ss = _ss()
    st.title("Live KV events")
    st.markdown(INTRO)
    allow = allowed_hosts()
    with st.form("live_form", border=True):
        st.text_area(
            "Endpoints (one per line: ENDPOINT [REPLAY_ENDPOINT])",
            value=DEFAULT_ENDPOINTS,
            key=W_ENDPOINTS,
            height=90,
        )
        c1, c2 = st.columns(2)
        c1.text_input("Topic prefix", value="", key=W_TOPIC, help="vLLM's default topic is empty")
        c2.checkbox(
            "Bind (vLLM connects here)",
            key=W_BIND,
            help="vLLM connects when its endpoint names a host (tcp://HOST:PORT) and binds when it has * or ::",
        )
        st.form_submit_button("Connect", on_click=_connect, type="primary", key=W_CONNECT)
    caption(
        "Loopback and ipc:// only"
        + (f"; also allowed: {', '.join(sorted(allow))}" if allow else "")
        + f". Other hosts: start the app with {ALLOW_ENV}=host1,host2."
    )
    if ss.get(ERROR):
        error(ss[ERROR])
    sess = ss.get(SESSION)
    if sess is None:
        st.info("Not connected. Type an endpoint and press Connect.")
        return
    st.button("Disconnect", key=W_STOP, on_click=_stop_session)
    if sess.alive:

        @st.fragment(run_every=REFRESH_S)
        def _panel() -> None:
            current = _ss().get(SESSION)
            if current is not None:
                _render_live(current)

        _panel()
    else:
        _render_live(sess)


# Streamlit runs a page file as ``__main__`` (st.navigation by path, or ``streamlit run``);
# importing the module (tests that call render() themselves) draws nothing.
if __name__ == "__main__":
    render()
