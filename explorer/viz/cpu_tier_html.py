"""HTML of the offloading connector's CPU tier (design section 10), drawn in the External tier
panel beside the GPU pool.

Pure functions of a step's connector reports (`ConnectorReport` kinds ``cpu_store``,
``cpu_load``, ``cpu_done``) and the snapshot after it (``Snapshot.cpu_tier``: the tier's chunks
in LRU order, and ``Snapshot.cached``: the GPU cache's hashes); nothing here works out what the
connector or its CPU manager would do:
- what went to the CPU tier this step: each store job (its blocks, what it evicted, or that the
  tier refused it) and the chunks the worker finished writing;
- what was loaded from the CPU tier into which GPU blocks;
- the tier itself, least recently used first: each chunk's hash, whether it is still being
  written or pinned by a load, whether it was stored or loaded this step, and whether the GPU
  cache still holds the same hash (a chunk the GPU lost is what a later request loads back).
"""

from __future__ import annotations

from explorer.numbers import counted
from explorer.scenario.connector_reports import ConnectorReport, CpuJobsDone, CpuLoad, CpuStore
from explorer.scenario.trace import Snapshot
from explorer.viz.text import esc

MAX_CHUNKS = 64  # chunks drawn in the tier row; the rest are counted
MAX_ROWS = 32  # store and load rows


def _h(block_hash: bytes) -> str:
    return block_hash.hex()[:8]


def _hashes(hashes: tuple[bytes, ...]) -> str:
    shown = ", ".join(_h(h) for h in hashes[:MAX_CHUNKS])
    return shown + (f" +{len(hashes) - MAX_CHUNKS:,}" if len(hashes) > MAX_CHUNKS else "")


def jobs_html(reports: tuple[ConnectorReport, ...]) -> str:
    """The step's store and load jobs and the worker's report, as the connector told them."""
    rows = []
    for r in [r for r in reports if isinstance(r, (CpuStore, CpuLoad, CpuJobsDone))][:MAX_ROWS]:
        rid = esc(r.request_id, 24)
        if isinstance(r, CpuStore) and r.refused:
            rows.append(
                f'<div class="px-xt-row px-xt-failed" data-px-cpu-refused="{esc(r.request_id)}"><b>{rid}</b>: '
                f"a store of {counted(len(r.hashes), 'block')} is refused: the CPU tier cannot evict enough "
                "(it tries again at the request's next step)</div>"
            )
        elif isinstance(r, CpuStore):
            evicted = f"; evicting the least recently used {_hashes(r.cpu_evicted)}" if r.cpu_evicted else ""
            rows.append(
                f'<div class="px-xt-row" data-px-cpu-store="{esc(r.request_id)}"><b>{rid}</b>: store job '
                f"for {counted(len(r.hashes), 'block')} to the CPU tier ({_hashes(r.hashes)}){evicted}</div>"
            )
        elif isinstance(r, CpuLoad):
            pairs = ", ".join(f"{_h(h)} → #{b}" for h, b in list(zip(r.hashes, r.block_ids))[:MAX_CHUNKS])
            rows.append(
                f'<div class="px-xt-row" data-px-cpu-load="{esc(r.request_id)}"><b>{rid}</b>: load job from '
                f"the CPU tier, {counted(len(r.hashes), 'chunk')} into GPU blocks: {pairs}</div>"
            )
        else:
            parts = []
            if r.hashes:
                parts.append(f"{counted(len(r.hashes), 'chunk')} written (BlockStored, medium CPU)")
            if r.cpu_loaded:
                parts.append(f"{counted(len(r.cpu_loaded), 'chunk')} loaded")
            rows.append(f'<div class="px-xt-row" data-px-cpu-done="1">The worker reports: {"; ".join(parts)}</div>')
    return "".join(rows)


def tier_html(reports: tuple[ConnectorReport, ...], after: Snapshot, cpu_blocks: int) -> str:
    """The CPU tier after the step, least recently used first, beside what the GPU holds."""
    tier = after.cpu_tier
    if tier is None:
        return ""
    stored = {h for r in reports if isinstance(r, CpuStore) and not r.refused for h in r.hashes}
    loaded = {h for r in reports if isinstance(r, CpuLoad) for h in r.hashes}
    on_gpu = {h for h, _ in after.cached}
    chips = []
    for h, chunk_id, ref_cnt in tier[:MAX_CHUNKS]:
        state = "writing" if ref_cnt < 0 else (f"pinned by {ref_cnt} load(s)" if ref_cnt else "ready")
        gpu = "also in the GPU cache" if h in on_gpu else "not in the GPU cache"
        cls = "px-cpu-chunk" + (" px-cpu-new" if h in stored else "") + (" px-cpu-loaded" if h in loaded else "")
        mark = "S" if h in stored else ("L" if h in loaded else ("" if h in on_gpu else "·"))
        chips.append(
            f'<span class="{cls}" data-px-cpu-chunk="{h.hex()}" '
            f'title="CPU chunk {chunk_id}: {state}; {gpu}">{_h(h)}{mark and " " + mark}</span>'
        )
    more = f" +{len(tier) - MAX_CHUNKS:,}" if len(tier) > MAX_CHUNKS else ""
    lost = sum(h not in on_gpu for h, _, _ in tier)
    return (
        f'<div class="px-xt-row" data-px-cpu-tier="{len(tier)}"><b>CPU tier</b>: {len(tier):,} of '
        f"{cpu_blocks:,} chunks, least recently used first (S stored this step, L loaded this step, "
        f"· lost by the GPU cache: {lost:,}): {''.join(chips) or 'empty'}{more}</div>"
    )


def cpu_tier_html(reports: tuple[ConnectorReport, ...], after: Snapshot, cpu_blocks: int) -> str:
    """The CPU tier part of the panel; empty without a CPU tier."""
    if after.cpu_tier is None:
        return ""
    return jobs_html(reports) + tier_html(reports, after, cpu_blocks)
