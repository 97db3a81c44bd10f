"""The page checks a scenario against the CLI's replay caps (explorer/scenario/budget.py) under
the page's limits, before anything runs: the snapshots' block entries (the pool's and the live
requests'), counted by the CLI's own walk and refused with its message."""

from __future__ import annotations

import pytest

from explorer.errors import BadInput
from explorer.scenario.budget import snapshot_cells
from explorer.scenario.parse import parse_scenario_dict
from explorer.ui.state import UI_LIMITS, check_size


def _resets(num_blocks: int, n: int, arrivals: int = 0) -> dict:
    arrive = [{"op": "arrive", "id": f"R{i}", "prompt": f"{i * 10_000}:{i * 10_000 + 1_600}"} for i in range(arrivals)]
    return {"engine": {"num_blocks": num_blocks}, "steps": arrive + [{"op": "reset"}] * n}


def test_a_replay_past_the_pages_snapshot_cap_is_refused_with_the_clis_message():
    fits = parse_scenario_dict(_resets(2_400, 599), "fits.toml", UI_LIMITS)
    assert snapshot_cells(fits, True) == 600 * 2_400 <= UI_LIMITS.max_snapshot_cells
    check_size(fits)
    over = parse_scenario_dict(_resets(2_600, 599), "over.toml", UI_LIMITS)
    with pytest.raises(
        BadInput, match=r"over\.toml: replaying 599 steps on 2,600 blocks .* more than the limit 1,500,000"
    ) as refused:
        check_size(over)
    # no command line to offer on the page: the way out is a smaller scenario
    assert "run --json" not in str(refused.value) and str(refused.value).endswith(": use fewer blocks or fewer steps")


def test_the_live_requests_blocks_count_too():
    """(steps + 1) x blocks, the page's own count before, let this one through: 40 live requests
    of 100 blocks each add 4,000 entries to each of the last 560 snapshots."""
    sc = parse_scenario_dict(_resets(2_400, 559, arrivals=40), "live.toml", UI_LIMITS)
    assert (len(sc.ops) + 1) * sc.engine.num_blocks <= UI_LIMITS.max_snapshot_cells < snapshot_cells(sc, True)
    with pytest.raises(BadInput, match=r"live\.toml: .*block entries"):
        check_size(sc)
