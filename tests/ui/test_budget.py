"""A session's memory budget: the estimate made before a replay covers what the replay holds, a
replay too big for the budget is refused before it runs, and the cache stays within it."""

from __future__ import annotations

import gc
import tracemalloc

import pytest

from explorer.errors import BadInput
from explorer.scenario.budget import snapshot_cells
from explorer.scenario.parse import parse_scenario_text
from explorer.ui.budget import SESSION_BUDGET, ReplayCache, check_budget, estimate_replay_bytes
from explorer.ui.state import UI_LIMITS, replay_until_error
from explorer.ui.state import encode_blob as blob
from tests.ui.helpers import errors, explorer, no_exception, page_title


def _toml(engine: dict[str, int], steps: list[dict[str, str]]) -> str:
    lines = ["[engine]", *(f"{k} = {v}" for k, v in engine.items())]
    for s in steps:
        lines.append("[[steps]]")
        lines.extend(f'{k} = "{v}"' for k, v in s.items())
    return "\n".join(lines) + "\n"


def pool_heavy() -> str:
    steps = []
    for i in range(12):
        p = f"{i * 10_000}:{i * 10_000 + 3_000}"
        steps += [{"op": "arrive", "id": f"R{i}", "prompt": p}, {"op": "admit", "id": f"R{i}"}]
        steps.append({"op": "finish", "id": f"R{i}"})
    return _toml({"block_size": 16, "num_blocks": 2_000}, steps)


def requests_heavy() -> str:
    steps = [{"op": "arrive", "id": f"W{i}", "prompt": f"{i * 5_000}:{i * 5_000 + 800}"} for i in range(40)]
    steps += [{"op": "admit", "id": "W0"}, {"op": "generate", "id": "W0", "tokens": "900000:900300"}]
    return _toml({"block_size": 1, "num_blocks": 2_000}, steps)


def _measured(text: str) -> tuple[int, int]:
    sc = parse_scenario_text(text, "t.toml", UI_LIMITS)
    gc.collect()
    tracemalloc.start()
    try:
        rep = replay_until_error(sc)
        assert rep.error is None, rep.error
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return held, estimate_replay_bytes(sc)


def engine_steps_heavy() -> str:
    lines = ["[engine]", "block_size = 16", "num_blocks = 2000", "max_num_batched_tokens = 512", "max_num_seqs = 16"]
    for i in range(16):
        lines += ["[[steps]]", 'op = "arrive"', f'id = "E{i}"', f'prompt = "{i * 10_000}:{i * 10_000 + 1_500}"']
        lines.append(f'output = "{900_000 + i * 1_000}:{900_000 + i * 1_000 + 200}"')
    lines += ["[[steps]]", 'op = "step"'] * 120
    return "\n".join(lines) + "\n"


def hybrid_heavy() -> str:
    groups = (
        'kv_cache_groups = [{ kind = "full_attention" }, { kind = "sliding_window", sliding_window = 64 }, '
        '{ kind = "sliding_window", sliding_window = 16, block_size = 32 }]\nprefix_cache_retention_interval = "dense"\n'
    )
    steps = [
        {"op": "arrive", "id": f"H{i}", "prompt": f"0:600, {i * 5_000 + 10_000}:{i * 5_000 + 10_400}"}
        for i in range(20)
    ]
    for i in range(0, 20, 2):
        steps.append({"op": "admit", "id": f"H{i}"})
    return _toml({"block_size": 16, "num_blocks": 2_000}, steps).replace("[engine]\n", "[engine]\n" + groups, 1)


def test_the_estimate_covers_a_hybrid_replay():
    held, est = _measured(hybrid_heavy())
    assert held <= est, (held, est)


def test_the_estimate_covers_an_engine_step_replay():
    held, est = _measured(engine_steps_heavy())
    assert held <= est, (held, est)


@pytest.mark.parametrize("make", [pool_heavy, requests_heavy], ids=["pool", "requests"])
def test_the_estimate_covers_what_a_replay_holds(make):
    held, est = _measured(make())
    # Snapshots share every piece that did not change with the one before, while the estimate
    # counts each in full: an upper bound, within a small factor on these scenarios.
    assert held <= est <= 8 * held, (held, est)


def test_a_replay_over_the_budget_is_refused_with_its_size():
    sc = parse_scenario_text(requests_heavy(), "big.toml", UI_LIMITS)
    need = estimate_replay_bytes(sc)
    assert check_budget(sc, need) == need
    with pytest.raises(BadInput, match=r"big\.toml: .*would hold about .* MiB, more than one session's budget"):
        check_budget(sc, need - 1)


def test_the_cache_keeps_within_its_budget_and_makes_room_before_it_makes():
    cache = ReplayCache(budget=100)
    made = []

    def make(v):
        def f():
            made.append((v, cache.used))
            return v

        return f

    assert cache.get("a", make("A"), 60) == "A"
    assert cache.get("b", make("B"), 60) == "B"  # "a" left before "b" was made
    assert made[-1] == ("B", 0) and len(cache) == 1
    assert cache.get("b", make("X"), 60) == "B" and len(made) == 2  # a hit makes nothing
    assert cache.get("c", make("C"), lambda v: 30) == "C" and cache.used == 90
    cache.clear()
    assert cache.used == 0 and cache.peek("b") is None


def test_a_link_whose_replay_is_over_the_budget_shows_one_error_and_the_lesson():
    """Over the snapshot cap the page shares with the CLI (its live requests' blocks), then, with
    long labels on few blocks, under that cap but over the session's memory budget."""
    steps = [{"op": "arrive", "id": f"W{i}", "prompt": f"{i * 5_000}:{i * 5_000 + 2_000}"} for i in range(250)]
    huge = _toml({"block_size": 4, "num_blocks": 300}, steps)
    salted = [dict(s, cache_salt=f"{i:04d}" + "s" * 60) for i, s in enumerate(steps[:100])]
    labelled = _toml({"block_size": 16, "num_blocks": 300}, salted)
    sc = parse_scenario_text(labelled, "x", UI_LIMITS)
    assert snapshot_cells(sc, True) <= UI_LIMITS.max_snapshot_cells and estimate_replay_bytes(sc) > SESSION_BUDGET
    for name, text, said in (("huge.toml", huge, "block entries"), ("salted.toml", labelled, "budget")):
        at = explorer(query={"up": blob({"name": name, "toml": text})})
        no_exception(at)
        errs = errors(at)
        assert len(errs) == 1 and name in errs[0] and said in errs[0], errs
        assert page_title(at) == "Two chat turns"


def test_a_session_that_ends_releases_its_replays():
    from explorer.ui.budget import release_cache

    cache = ReplayCache()
    cache.get("a", lambda: object(), 10)
    release_cache(cache)
    assert len(cache) == 0 and cache.used == 0
