"""The clean playground: the "Blank pool" scenario (an engine and no steps), the settings a
"start from an empty pool" keeps, and the sentence that says which state the playground's
next step continues from (no Streamlit here).

The blank pool is not a lesson (it has no narrative, notes or checks), so it is not a file in
lessons/: the explorer knows it by the name ``blank_pool`` (``?lesson=blank_pool`` in a link).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from explorer.scenario.spec import ENGINE_DEFAULTS, EngineConfig
from explorer.scenario.trace import Trace

BLANK_POOL = "blank_pool"
BLANK_POOL_TITLE = "Blank pool"
BLANK_POOL_SOURCE = "blank pool"
# vLLM's defaults for what the explorer's settings can change (design section 3), no steps.
BLANK_POOL_TOML = f'''title = "{BLANK_POOL_TITLE}"
description = "An empty pool and no requests: the playground's steps are the whole scenario."

[engine]
block_size = {ENGINE_DEFAULTS["block_size"]}
num_blocks = {ENGINE_DEFAULTS["num_blocks"]}
hash_algo = "{ENGINE_DEFAULTS["hash_algo"]}"
'''.encode()
_KEPT = ("block_size", "num_blocks", "hash_algo", "hash_seed", "enable_prefix_caching")


def empty_pool_engine(engine: EngineConfig, changed: Mapping[str, Any]) -> dict[str, Any]:
    """The settings changes (against the blank pool's defaults) that keep the current scenario's
    block size, pool size, hash algorithm, seed and caching switch: ``engine`` is the scenario's
    own engine, ``changed`` what the user changed on top of it."""
    out: dict[str, Any] = {}
    for key in _KEPT:
        value = changed.get(key, getattr(engine, key))
        if value != ENGINE_DEFAULTS[key]:
            out[key] = value
    return out


def _status_list(trace: Trace) -> str:
    by_status: dict[str, list[str]] = {}
    for r in trace.final.requests:
        by_status.setdefault(r.status, []).append(r.request_id)
    if not by_status:
        return "no live request"
    parts = []
    for status, ids in by_status.items():
        shown = ", ".join(ids[:6]) + (f" and {len(ids) - 6} more" if len(ids) > 6 else "")
        parts.append(f"{shown} {'is' if len(ids) == 1 else 'are'} {status}")
    return "; ".join(parts)


def continues_from(trace: Trace, title: str, base_ops: int) -> str:
    """Which state the next playground step starts from, as the replay's last snapshot reports
    it: the step, its requests and statuses, the blocks holding a hash (cached) and the free ones."""
    n = len(trace.steps)
    final = trace.final
    cached = sum(1 for _, h in final.blocks if h is not None)
    evictable = sum(1 for rc, h in final.blocks if h is not None and rc == 0)
    own = min(n, base_ops)
    where = f"after step {n} of {title}" if n else f"from the start of {title}"
    if n > own:
        where += f" ({own} of its own, {n - own} from the playground)" if own else " (all from the playground)"
    blocks = f"{cached:,} {'block' if cached == 1 else 'blocks'} cached"
    if cached:
        blocks += f" ({evictable:,} of them free, evictable)" if evictable else " (all in use)"
    free = final.num_free_blocks
    return f"New steps continue {where}: {_status_list(trace)}, {blocks}, {free:,} free {'block' if free == 1 else 'blocks'}."
