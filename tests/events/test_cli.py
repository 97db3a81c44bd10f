"""`python -m explorer publish` and `listen` as processes, on 127.0.0.1."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from explorer.core.events import KVEventBatch
from explorer.events.publisher import KVEventPublisher
from tests.events.helpers import LOOPBACK, free_port, scenario_events_json, scenario_file, stored

ROOT = Path(__file__).resolve().parents[2]


def explorer(*args, **kw):
    return subprocess.Popen(
        [sys.executable, "-m", "explorer", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        **kw,
    )


def finish(proc, timeout=30):
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"process hung; stderr: {err}") from None
    return proc.returncode, out, err


def test_publish_to_listen_round_trip(tmp_path):
    scenario = scenario_file(tmp_path)
    expected = scenario_events_json(scenario)
    assert len(expected) == 4
    port, rport = free_port(), free_port()
    listener = explorer(
        "listen",
        "--bind",
        "--endpoint",
        f"tcp://{LOOPBACK}:{port}",
        "--replay-endpoint",
        f"tcp://{LOOPBACK}:{rport}",
        "--json",
        "--max-batches",
        str(len(expected)),
        "--timeout",
        "8",
    )
    time.sleep(0.5)
    publisher = explorer(
        "publish",
        str(scenario),
        "--endpoint",
        f"tcp://{LOOPBACK}:{port}",
        "--replay-endpoint",
        f"tcp://{LOOPBACK}:{rport}",
        "--wait",
        "1",
        "--hold",
        "2",
    )
    rc, out, err = finish(listener)
    prc, pout, perr = finish(publisher)
    assert rc == 0, err
    assert prc == 0, perr
    lines = [json.loads(x) for x in out.splitlines()]
    batches, summary = lines[:-1], lines[-1]["summary"]
    assert [b["seq"] for b in batches] == [0, 1, 2, 3]
    assert [b["events"] for b in batches] == expected
    assert all(b["data_parallel_rank"] == 0 and isinstance(b["ts"], float) for b in batches)
    assert all(set(b) == {"seq", "ts", "events", "data_parallel_rank"} for b in batches)
    assert summary["batches"] == 4
    assert summary | {"replayed": 0} == {
        "batches": 4,
        "gaps": 0,
        "replayed": 0,
        "lost": 0,
        "malformed": 0,
        "restarts": 0,
    }
    published = json.loads(pout)
    assert published["batches"] == 4 and published["replay_endpoint"] == f"tcp://{LOOPBACK}:{rport}"


def test_late_listener_recovers_the_first_batches_by_replay():
    port, rport = free_port(), free_port()
    with KVEventPublisher(f"tcp://{LOOPBACK}:{port}", f"tcp://{LOOPBACK}:{rport}") as pub:
        for i in range(3):  # nobody listens yet: these are dropped
            pub.publish(KVEventBatch(float(i), [stored(i)]))
        listener = explorer(
            "listen",
            "--bind",
            "--endpoint",
            f"tcp://{LOOPBACK}:{port}",
            "--replay-endpoint",
            f"tcp://{LOOPBACK}:{rport}",
            "--json",
            "--max-batches",
            "6",
            "--timeout",
            "5",
        )
        try:
            end = time.monotonic() + 20
            i = 3
            while listener.poll() is None and time.monotonic() < end:
                pub.publish(KVEventBatch(float(i), [stored(i)]))
                i += 1
                pub.serve_for(0.1)
        finally:
            rc, out, err = finish(listener)
    assert rc == 0, err
    lines = [json.loads(x) for x in out.splitlines()]
    assert [b["seq"] for b in lines[:-1]] == [0, 1, 2, 3, 4, 5]
    summary = lines[-1]["summary"]
    assert summary["batches"] == 6 and summary["replayed"] >= 3
    assert summary["gaps"] == 0 and summary["lost"] == 0 and summary["restarts"] == 0


def test_listen_on_a_dead_endpoint_times_out_cleanly():
    t0 = time.monotonic()
    rc, out, err = finish(
        explorer("listen", "--endpoint", f"tcp://{LOOPBACK}:{free_port()}", "--timeout", "0.5", "--json")
    )
    assert rc == 0, err
    assert json.loads(out) == {
        "summary": {"batches": 0, "gaps": 0, "replayed": 0, "lost": 0, "malformed": 0, "restarts": 0}
    }
    assert time.monotonic() - t0 < 15


def test_listen_text_output():
    rc, out, err = finish(explorer("listen", "--endpoint", f"tcp://{LOOPBACK}:{free_port()}", "--timeout", "0.2"))
    assert rc == 0 and out.startswith("summary: batches 0")


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    cases = [
        ("listen", "--endpoint", "nonsense"),
        ("listen", "--endpoint", "tcp://127.0.0.1:99999"),
        ("listen", "--endpoint", f"tcp://{LOOPBACK}:1", "--replay-endpoint", "udp://x:1"),
        ("publish", str(tmp_path / "missing.toml"), "--endpoint", f"tcp://{LOOPBACK}:1"),
        ("publish", str(scenario_file(tmp_path)), "--endpoint", "tcp://nohost"),
        (
            "publish",
            str(scenario_file(tmp_path)),
            "--endpoint",
            f"tcp://{LOOPBACK}:{free_port()}",
            "--replay-endpoint",
            "ipc://",
        ),
    ]
    procs = [explorer(*c) for c in cases]
    for c, p in zip(cases, procs):
        rc, out, err = finish(p)
        assert rc == 2, (c, err)
        assert out == "" and err.startswith("error: ") and err.count("\n") == 1, (c, err)


def test_bind_on_a_port_in_use_is_bad_input():
    import zmq

    ctx = zmq.Context()
    s = ctx.socket(zmq.SUB)
    s.setsockopt(zmq.LINGER, 0)
    try:
        s.bind(f"tcp://{LOOPBACK}:0")
        ep = s.getsockopt_string(zmq.LAST_ENDPOINT)
        rc, out, err = finish(explorer("listen", "--bind", "--endpoint", ep, "--timeout", "1"))
        assert rc == 2 and "in use" in err and out == ""
    finally:
        s.close(linger=0)
        ctx.term()
