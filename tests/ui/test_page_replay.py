"""The replay page under AppTest: a tiny uploaded trace, a grid of block sizes and schedulers
equal cell for cell to serial `explorer replay` runs, bad input, cancel, two sessions taking
turns, and where the cells run (the Ray cluster the server names, or a local instance)."""

from __future__ import annotations

import json
import time

import pytest
from streamlit.testing.v1 import AppTest

from explorer.traffic.worker import RAY_ADDRESS_ENV, ray_address
from tests.cli_run import run_explorer

TIMEOUT = 60


def _app():
    # Streamlit runs a page file as a script: its module-level render() call draws the page.
    import runpy

    runpy.run_module("explorer.ui.pages.replay", run_name="__main__")


def line(ids, n, out=1, ts=0):
    return json.dumps({"timestamp": ts, "input_length": n, "output_length": out, "hash_ids": ids})


# the hand-derived trace of tests/traffic/helpers.py: 272 hit tokens with 10 blocks of 16
TINY = (
    "\n".join(
        [
            line([0], 64),
            line([1], 80),
            line([0], 40),
            line([0], 80),
            line([1], 80),
            line([2, 3], 600),
            line([1], 81),
            line([0], 80),
        ]
    )
    + "\n"
).encode()


def fresh() -> AppTest:
    at = AppTest.from_function(_app, default_timeout=TIMEOUT)
    at.run()
    assert not at.exception
    return at


def button(at: AppTest, key: str):
    return at.button(key=key)


def wait_done(at: AppTest, timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while any(at.session_state[k] is not None for k in ("replay_job", "replay_wait") if k in at.session_state):
        if time.monotonic() > deadline:
            raise AssertionError("the replay worker did not finish in time")
        time.sleep(0.3)
        at.run()
        assert not at.exception
    at.run()


def upload(at: AppTest, data: bytes, name: str = "tiny.jsonl") -> None:
    at.radio(key="replay_source").set_value("Upload a trace").run()
    at.file_uploader(key="replay_upload").set_value((name, data, "application/json")).run()


def test_page_renders_with_defaults():
    at = fresh()
    assert "Replay a trace" in at.header[0].value
    assert button(at, "replay_run")
    assert not at.error


def test_tiny_upload_sweep_plots_and_table():
    at = fresh()
    upload(at, TINY)
    at.text_input(key="replay_sizes").set_value("10, 40").run()
    button(at, "replay_run").click().run()
    wait_done(at)
    assert not at.error, [e.value for e in at.error]
    res = at.session_state["replay_result"]
    by = {(r["policy"], r["num_blocks"]): r for r in res["results"]}
    assert by[("vllm", 10)]["hit_tokens"] == 272 and by[("vllm", 10)]["skipped"] == 1
    # unbounded by hand: C 32, D 64, E 64, G 80, H 64. At 40 blocks the 600-token request
    # fits, and evicts more than it brings: a bigger cache, fewer hits here.
    assert by[("unbounded", None)]["hit_tokens"] == 304
    assert by[("vllm", 40)]["skipped"] == 0 and by[("vllm", 40)]["hit_tokens"] <= 304
    assert res["requests"] == 8 and res["prompt_tokens"] == 1105
    # hit rate vs size (with the bounds), missed tokens by reason, time per size
    assert [c.key for c in at.get("plotly_chart")] == ["replay_fig_size", "replay_fig_reasons", "replay_fig_time"]
    assert len(at.dataframe) == 2  # the reasons' shares, then the results
    # the page is still usable: another run with other settings, through vLLM's scheduler
    assert at.multiselect(key="replay_schedulers").disabled  # its knobs wait for the policy
    at.multiselect(key="replay_policies").set_value(["vllm", "scheduler"]).run()
    at.multiselect(key="replay_schedulers").set_value(["sync"]).run()
    at.number_input(key="replay_budget").set_value(512).run()
    button(at, "replay_run").click().run()
    wait_done(at)
    assert not at.error
    runs = at.session_state["replay_result"]["results"]
    assert [r["policy"] for r in runs] == ["vllm", "vllm", "scheduler", "scheduler"]
    s = runs[2]["scheduler"]
    assert (s["scheduler"], s["max_num_batched_tokens"]) == ("sync", 512) and s["peak_running"] >= 1
    assert sum(runs[2]["hits"]) == runs[2]["hit_tokens"] and runs[2]["skipped"] == 1
    assert "peak running" in at.dataframe[-1].value.columns


def plain(shown: str) -> str:
    """A message as the page wrote it: the page escapes Markdown and breaks links with word
    joiners after colons."""
    return shown.replace("\\", "").replace("\u2060", "")


def _tiny_sweep_caption() -> tuple[str, str]:
    """A one-cell sweep of the tiny trace: (the result's backend, the results' first caption)."""
    at = fresh()
    upload(at, TINY)
    at.text_input(key="replay_sizes").set_value("10").run()
    at.multiselect(key="replay_policies").set_value(["vllm"]).run()
    button(at, "replay_run").click().run()
    wait_done(at)
    assert not at.error, [e.value for e in at.error]
    res = at.session_state["replay_result"]
    assert res["results"][0]["hit_tokens"] == 272
    shown = [plain(c.value) for c in at.caption]
    return res["backend"], next(text for text in shown if "prompt tokens/s" in text)


def test_the_sweep_joins_the_cluster_the_server_names_else_a_local_ray(monkeypatch):
    # the suite's run names its loopback head (tests/conftest.py), as `EXPLORER_RAY_ADDRESS=HOST:PORT
    # streamlit run app.py` does; the worker process reads the variable when the job starts
    named = ray_address()
    assert named, f"the suite's run names a Ray head in {RAY_ADDRESS_ENV} (tests/conftest.py)"
    backend, text = _tiny_sweep_caption()
    assert backend == f"ray://{named}" and text.endswith(f"on the Ray cluster at ray://{named}")
    monkeypatch.delenv(RAY_ADDRESS_ENV)
    backend, text = _tiny_sweep_caption()
    assert backend == "local" and text.endswith("on a local Ray instance")
    monkeypatch.setenv(RAY_ADDRESS_ENV, "127.0.0.1:1")  # nothing listens there
    at = fresh()
    upload(at, TINY)
    button(at, "replay_run").click().run()
    wait_done(at)
    assert [plain(e.value) for e in at.error] == [
        f"{RAY_ADDRESS_ENV} 127.0.0.1:1: no Ray cluster there (Connection refused)"
    ]


@pytest.mark.parametrize(
    "data,needle",
    [
        (b"\x89PNG\r\n\x1a\n\x00\x00", "not a text file"),
        (b'{"timestamp": 0, "input_length": 9999, "output_length": 1, "hash_ids": [1]}\n', "line 1"),
        (b"\n\n", "empty trace"),
        (b"{oops\n", "not JSON"),
    ],
)
def test_bad_upload_one_error_page_usable(data, needle):
    at = fresh()
    upload(at, data, "bad.jsonl")
    button(at, "replay_run").click().run()
    assert len(at.error) == 1 and needle in at.error[0].value
    assert "replay_job" not in at.session_state or at.session_state["replay_job"] is None
    # recover: a good upload runs (to its end once; for the other inputs, which fail at the same
    # place before any job, it is enough that its job starts: it is cancelled, which is quicker)
    at.file_uploader(key="replay_upload").set_value(("tiny.jsonl", TINY, "application/json")).run()
    at.text_input(key="replay_sizes").set_value("10").run()
    button(at, "replay_run").click().run()
    assert not at.error
    if needle == "not a text file":
        wait_done(at)
        assert not at.error and at.session_state["replay_result"]["requests"] == 8
    else:
        proc = at.session_state["replay_job"]["proc"]
        button(at, "replay_cancel").click().run()
        assert proc.wait(timeout=10) is not None and any("cancelled" in i.value for i in at.info)


def test_bad_sizes_one_error():
    at = fresh()
    at.text_input(key="replay_sizes").set_value("1000, lots").run()
    button(at, "replay_run").click().run()
    assert len(at.error) == 1 and "lots" in at.error[0].value


def test_limits_one_error_each():
    at = fresh()
    at.text_input(key="replay_sizes").set_value("1000, 50000000").run()
    button(at, "replay_run").click().run()
    assert len(at.error) == 1 and "limit" in at.error[0].value
    # the whole shipped trace at block size 1 is too much work for the page
    at.text_input(key="replay_sizes").set_value("1000").run()
    at.text_input(key="replay_block_sizes").set_value("1").run()
    at.number_input(key="replay_limit").set_value(0).run()
    button(at, "replay_run").click().run()
    wait_done(at)
    assert len(at.error) == 1 and "larger block size" in at.error[0].value
    assert button(at, "replay_run")


def test_cancel_terminates_the_worker():
    at = fresh()
    at.number_input(key="replay_limit").set_value(0).run()  # the whole shipped trace: minutes
    button(at, "replay_run").click().run()
    job = at.session_state["replay_job"]
    proc = job["proc"]
    assert proc.poll() is None  # running
    button(at, "replay_cancel").click().run()
    assert proc.wait(timeout=10) is not None  # terminated, not left running
    assert "replay_job" not in at.session_state or at.session_state["replay_job"] is None
    assert any("cancelled" in i.value for i in at.info)
    assert button(at, "replay_run")


@pytest.mark.parametrize(
    "block_sizes,sizes,needle",
    [
        ("16, x", "10", "is not an integer"),
        ("0", "10", "is not between 1 and"),
        ("16, 16", "10", "is listed twice"),
        (" , ", "10", "none given"),
        ("1, 2, 3, 4, 5, 6, 7, 8, 9", "10", "more than 8"),
        # 8 block sizes x 40 cache sizes x 2 policies: 640 cells
        ("1, 2, 3, 4, 5, 6, 7, 8", ", ".join(str(n) for n in range(10, 50)), "640 cells"),
    ],
)
def test_bad_block_sizes_or_grid_one_error(block_sizes, sizes, needle):
    at = fresh()
    at.text_input(key="replay_block_sizes").set_value(block_sizes).run()
    at.text_input(key="replay_sizes").set_value(sizes).run()
    at.multiselect(key="replay_policies").set_value(["vllm", "lru"]).run()
    button(at, "replay_run").click().run()
    assert len(at.error) == 1 and needle in at.error[0].value, [e.value for e in at.error]
    assert at.session_state["replay_job"] is None if "replay_job" in at.session_state else True
    assert button(at, "replay_run")


def test_a_grid_of_block_sizes_and_schedulers_equals_serial_replays(tmp_path):
    at = fresh()
    upload(at, TINY)
    at.text_input(key="replay_block_sizes").set_value("16, 32").run()
    at.text_input(key="replay_sizes").set_value("10, 40").run()
    at.multiselect(key="replay_policies").set_value(["vllm", "unbounded", "scheduler"]).run()
    at.multiselect(key="replay_schedulers").set_value(["async", "sync"]).run()
    at.number_input(key="replay_budget").set_value(512).run()
    button(at, "replay_run").click().run()
    wait_done(at)
    assert not at.error, [e.value for e in at.error]
    res = at.session_state["replay_result"]
    runs = res["results"]
    # per block size: vllm at 2 sizes, unbounded once, the scheduler at 2 sizes under each scheduler
    assert len(runs) == 14 and res["block_sizes"] == [16, 32] and res["schedulers"] == ["async", "sync"]
    trace = tmp_path / "tiny.jsonl"
    trace.write_bytes(TINY)
    seen = set()
    for r in runs:
        sched = r["scheduler"]["scheduler"] if r["policy"] == "scheduler" else None
        seen.add((r["block_size"], r["policy"], r["num_blocks"], sched))
        argv = ["replay", str(trace), "--json", "--policy", r["policy"], "--block-size", str(r["block_size"])]
        argv += ["--num-blocks", str(r["num_blocks"] or 10)]
        if sched:
            argv += ["--scheduler", sched, "--max-num-batched-tokens", "512"]
        done = run_explorer(*argv)
        assert done.returncode == 0, done.stderr
        serial = json.loads(done.stdout)
        for key in ("block_size", "skipped", "hit_tokens", "hit_rate", "miss_tokens", "bound_belady", "bound_infinite"):
            assert r.get(key) == serial.get(key), (r["policy"], r["block_size"], r["num_blocks"], sched, key)
        if sched:
            assert r["scheduler"] == serial["scheduler"] and r["hits"] == serial["hits"]
        assert sum(r["hits"]) == r["hit_tokens"]
    assert len(seen) == 14
    # one line per policy, block size and scheduler, on a cache-size axis in tokens
    fig = at.get("plotly_chart")[0].proto.spec
    names = [t["name"] for t in json.loads(fig)["data"]]
    for bs in (16, 32):
        assert f"vLLM free-queue order (the engine), block size {bs}" in names
        assert f"vLLM's scheduler, concurrent (the engine), block size {bs}, sync" in names
        assert f"Belady's MIN (an eviction that knows the future; bound, not vLLM), block size {bs}" in names
    vllm32 = next(t for t in json.loads(fig)["data"] if t["name"].startswith("vLLM free-queue") and "32" in t["name"])
    assert list(vllm32["x"]) == [10 * 32, 40 * 32]
    assert any("in tokens" in c.value for c in at.caption)
    table = at.dataframe[-1].value
    assert {"block size", "scheduler", "cache tokens"} <= set(table.columns)
    # the missed tokens and the time plot show one block size: picking 32 redraws them at 32
    at.selectbox(key="replay_show_bs").set_value(32).run()
    titles = [json.loads(c.proto.spec)["layout"]["title"]["text"] for c in at.get("plotly_chart")]
    assert any("block size 32" in t and "Missed tokens" in t for t in titles), titles
    assert not at.exception


def test_a_second_session_waits_its_turn_and_runs_when_the_first_is_cancelled():
    first, second = fresh(), fresh()
    first.number_input(key="replay_limit").set_value(0).run()  # the whole shipped trace: minutes
    button(first, "replay_run").click().run()
    proc = first.session_state["replay_job"]["proc"]
    upload(second, TINY)
    second.text_input(key="replay_sizes").set_value("10").run()
    button(second, "replay_run").click().run()
    assert "replay_job" not in second.session_state or second.session_state["replay_job"] is None
    (note,) = [i.value for i in second.info if "Waiting" in i.value]
    assert note.startswith("Waiting for 1 other to finish: one heavy action (here a trace replay)")
    assert second.button(key="replay_cancel") and second.text_input(key="replay_sizes").disabled
    button(first, "replay_cancel").click().run()  # the first gives its turn back
    assert proc.wait(timeout=10) is not None
    wait_done(second)
    assert not second.error, [e.value for e in second.error]
    assert second.session_state["replay_result"]["results"][0]["hit_tokens"] == 272
    assert not [i.value for i in second.info if "Waiting" in i.value]


def test_cancel_while_waiting_leaves_the_queue():
    first, second, third = fresh(), fresh(), fresh()
    first.number_input(key="replay_limit").set_value(0).run()
    button(first, "replay_run").click().run()
    for at in (second, third):
        upload(at, TINY)
        at.text_input(key="replay_sizes").set_value("10").run()
        button(at, "replay_run").click().run()
    assert [i.value[:24] for i in third.info if "Waiting" in i.value] == ["Waiting for 2 others to "]
    button(second, "replay_cancel").click().run()  # the second gives up while it waits
    assert any("cancelled" in i.value for i in second.info) and button(second, "replay_run")
    third.run()
    assert [i.value[:24] for i in third.info if "Waiting" in i.value] == ["Waiting for 1 other to f"]
    button(first, "replay_cancel").click().run()
    wait_done(third)
    assert third.session_state["replay_result"]["results"][0]["hit_tokens"] == 272
