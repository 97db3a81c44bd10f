"""The count checks of tests/ui/test_sentences.py for an engine step: the NOW line and the phase
panels of a `step` or `abort`, and the External tier and CPU tier panels (drawn text, tags
stripped), each number compared with the record it describes (see sentence_checks)."""

from __future__ import annotations

from explorer.scenario.records import AdmissionCheck, CachedBlock, Lookup, Popped
from explorer.scenario.trace import Trace
from explorer.viz.cpu_tier_html import cpu_tier_html
from explorer.viz.external_tier_html import external_tier_html
from tests.step_records import evictions, touched_ids
from tests.ui.sentence_checks import (
    Checks,
    N,
    _count_ids,
    check_eviction,
    free_states,
    held,
    newly_hashed,
    num_hashes,
    per_request,
    plain,
    popped,
)


def check_engine_now(c: Checks, trace: Trace, k: int, t: str) -> None:
    step, before, after = trace.steps[k - 1], trace.snapshot_at(k - 1), trace.snapshot_at(k)
    where = (k, t)
    rid = step.op.id or ""
    for n, _, hashed in c.each(r"arrives with " + N + r" prompt tokens?(, " + N + r" blocks? hashed)?", t):
        req = after.request(rid)
        assert req is not None
        c.eq(
            "engine now: arrives with N prompt tokens, F hashed",
            (n, hashed or 0),
            (req.num_prompt_tokens, num_hashes(req)),
            where,
        )
    for (n,) in c.each(r"finish_requests frees " + N + r" blocks?", t):
        c.eq("engine now: abort frees N blocks", n, len(held(before.request(rid))), where)
    es = step.engine_step
    if es is None:
        return
    sched = trace.scenario.sched
    assert sched is not None
    for used, budget, n, parts in c.each(
        r"schedule\(\) gave "
        + N
        + r" of the "
        + N
        + r"-token budget to "
        + N
        + r" requests?(?:: (.*?)(?: \.\.\.)?)?\.(?: |$)",
        t,
    ):
        said = (used, budget, n) + ((per_request(parts),) if parts else ())
        rec = (sum(es.scheduled.values()), sched.max_num_batched_tokens, len(es.scheduled))
        c.eq(
            "engine now: schedule() gave U of B to R requests",
            said,
            rec + ((dict(list(es.scheduled.items())[:12]),) if parts else ()),
            where,
        )
    more = r"(?: and " + N + r" more requests?)?"
    for parts, n in c.each(r"Tokens in flight \(async placeholders\): (.*?)" + more + "; a placeholder", t):
        flight = [s for s in es.batch if s.num_placeholders]
        c.eq(
            "engine now: tokens in flight",
            (per_request(parts), len(per_request(parts)) + (n or 0)),
            ({s.request_id: s.num_placeholders for s in flight[:8]}, len(flight)),
            where,
        )
    for parts, n in c.each(r"delivered sampled tokens to (.*?)" + more + r"\.(?: |$)", t):
        c.eq(
            "engine now: delivered tokens",
            (per_request(parts), len(per_request(parts)) + (n or 0)),
            ({r: len(v) for r, v in list(es.outputs.items())[:8]}, len(es.outputs)),
            where,
        )
    c.events("engine now: KV event batch counts", r"KV event batch: (.*?)\.(?: |$)", t, step, where)


def check_engine_panels(c: Checks, trace: Trace, k: int, panels: dict[str, str]) -> None:
    step, before, after = trace.steps[k - 1], trace.snapshot_at(k - 1), trace.snapshot_at(k)
    where = (k, panels)
    lk = step.last(Lookup)
    t = panels.get("lookup", "")
    for who, n, cap, hit in c.each(
        r"get_computed_blocks for (.*?): "
        + N
        + r" tokens?, at most "
        + N
        + r" blocks? may hit; the walk hit "
        + N
        + r" tokens",
        t,
    ):
        assert lk is not None
        c.eq("engine lookup: the request looked up", who, lk.request_id, where)
        req = before.request(who) or after.request(who)
        rec_n = req.num_tokens if req is not None else n
        c.eq("engine lookup: N tokens, cap, hit", (n, cap, hit <= n), (lk.num_tokens, lk.cap_blocks, True), where)
        c.eq("engine lookup: N tokens, cap, hit", (n, hit), (rec_n, lk.hit_tokens), where)
    t = panels.get("allocate", "")
    said = 0
    for _rid, checks, gates, refused, new in c.each(
        r"(?:^|(?<=\. ))(\S+): "
        + N
        + r" allocate_slots checks?(?: \("
        + N
        + r" whole-sequence gates?\))?(?:, "
        + N
        + r" refused \(required > free\))?(?:, "
        + N
        + r" new blocks?)?\.",
        t,
    ):
        mine = [a for a in step.of(AdmissionCheck) if a.request_id == _rid]
        c.eq(
            "engine allocate: rid: K checks (G gates), F refused",
            (checks, gates or 0, refused or 0),
            (len(mine), sum(a.full_sequence for a in mine), sum(not a.ok for a in mine)),
            where,
        )
        said += new or 0
    if step.of(AdmissionCheck) and t:
        c.eq("engine allocate: new blocks add up to the popped", said, popped(trace, k), where)
    for total, free in c.each(r"touch\(\) took " + N + r" hit blocks? \(" + N + r" from the free queue\)", t):
        zero = sum(1 for b in set(touched_ids(step)) if before.blocks[b][0] == 0)
        # a block popped and cached earlier in the step can be hit: its ref_cnt before says nothing
        plain_touch = len(set(touched_ids(step))) == total and not set(touched_ids(step)) & {
            p.block_id for p in step.of(Popped)
        }
        c.eq(
            "engine allocate: touch() took H (x from free)",
            (total, free),
            (len(touched_ids(step)), zero if plain_touch else free),
            where,
        )
    t = panels.get("caching", "")
    for (n,) in c.each(N + r" blocks? got their hash in the hash map", t):
        rec = newly_hashed(before, after)
        gone = {b for b, _ in evictions(step)}
        if not gone & {cb.block_id for cb in step.of(CachedBlock)}:  # no block cached, then popped again
            c.eq("engine caching: N blocks got their hash", n, rec, where)
        c.eq("engine caching: N blocks got their hash (record)", n, len(step.of(CachedBlock)), where)
    for shown, more in c.each(r"in this step \(block indexes ([\d, \-a-z]*?)( \.\.\.)?\)", t):
        c.eq(
            "engine caching: the block indexes listed",
            (_count_ids(shown), bool(more)),
            (min(len(step.of(CachedBlock)), 12), len(step.of(CachedBlock)) > 12),
            where,
        )
    c.free_split("engine free: F freed, a front, b back, h held", panels.get("free", ""), step, before, after, where)
    free_states(c, trace, k, panels.get("free", ""), where)
    check_eviction(c, trace, k, panels.get("eviction", ""), where)


def check_external(c: Checks, trace: Trace, k: int) -> None:
    step, before, after = trace.steps[k - 1], trace.snapshot_at(k - 1), trace.snapshot_at(k)
    es, connector = step.engine_step, trace.scenario.connector
    if es is None or connector is None:
        return
    stored = sum(type(e).__name__ == "BlockStored" for e in step.events)
    t = plain(external_tier_html(es.connector, es.external, before, after, stored))
    where = (k, t)
    q = h = 0
    for rid, local, n in c.each(r"(?m)^(\S+): local hit " + N + " of " + N + " tokens?, then the connector", t):
        req = before.request(rid) or after.request(rid)  # its tokens when schedule() looked it up
        rep = next(r for r in es.connector if r.kind == "lookup" and r.request_id == rid)
        c.eq(
            "external: every lookup row, local hit L of N",
            (local, n),
            (rep.num_local_tokens, req.num_tokens if req else 0),
            where,
        )
    for rid, local, n, offer, queries, hits in c.each(
        r"(\S+): local hit "
        + N
        + r" of "
        + N
        + r" tokens?, then the connector (?:offers "
        + N
        + r" tokens? after it[^;]*|[^;]*); external queries "
        + N
        + r", hits "
        + N,
        t,
    ):
        req = before.request(rid) or after.request(rid)  # its tokens when schedule() looked it up
        rep = next(r for r in es.connector if r.kind == "lookup" and r.request_id == rid)
        c.eq(
            "external: local hit L of N, offers E, queries Q, hits",
            (local, n, queries, hits),
            (rep.num_local_tokens, req.num_tokens if req else 0, max(n - local, 0), offer or 0),
            where,
        )
        q, h = q + queries, h + hits
    pat = (
        r"(\S+): local hit "
        + N
        + " of "
        + N
        + r" tokens?, then the connector (?:offers "
        + N
        + r" tokens? after it[^;]*|[^;]*); "
    )
    for rid, local, n, offer, queries, hits in c.each(
        pat + r"resumed after a preemption, so its " + N + " queried and " + N + " hit", t
    ):
        req = before.request(rid)
        assert req is not None and req.num_preemptions > 0
        rep = next(r for r in es.connector if r.kind == "lookup" and r.request_id == rid)
        c.eq(
            "external: resumed lookup, Q queried, H hit",
            (local, n, queries, hits),
            (rep.num_local_tokens, req.num_tokens, n - local, offer or 0),
            where,
        )
    if "external_queries" in after.stats and "local hit" in t:
        grew = (
            after.stats["external_queries"] - before.stats.get("external_queries", 0),
            after.stats["external_hits"] - before.stats.get("external_hits", 0),
        )
        c.eq("external: lookups add up to the stats", (q, h), grew, where)
    for (parts,) in c.each(r"update_state_after_alloc \(num_external_tokens\): ([^\n]*)", t):
        c.eq("external: update_state_after_alloc counts", per_request(parts.strip()), dict(es.external or {}), where)
    for (n,) in c.each(r"BlockStored in this batch: " + N, t):
        c.eq("external: BlockStored in this batch", n, stored, where)
    for rid, kept, upto in c.each(
        r"(\S+): the load finished; [^(]*?(?:only the valid prefix, "
        + N
        + r" tokens?|up to "
        + N
        + r" computed tokens?)",
        t,
    ):
        rep = next(r for r in es.connector if r.kind == "loaded" and r.request_id == rid)
        c.eq(
            "external: load finished, up to N tokens",
            (kept or upto, kept is not None),
            (rep.num_tokens, rep.failed),
            where,
        )
    for rid, comp, nb in c.each(
        r"(\S+) waits for remote KV with " + N + r" tokens? counted as computed, holding " + N + r" blocks?", t
    ):
        req = after.request(rid)
        assert req is not None and req.status == "waiting_for_remote_kvs"
        c.eq(
            "external: waits with C computed, holding B blocks",
            (comp, nb, num_hashes(req) >= 0),
            (req.num_computed_tokens, len(req.block_ids), True),
            where,
        )
    for rid, n, ids in c.each(
        r"(\S+): the load reported invalid blocks; "
        + N
        + r" tokens? stays? valid(?:; blocks ([^ ]*(?:, #\d+)*) lost)?",
        t,
    ):
        rep = next(r for r in es.connector if r.kind == "failed" and r.request_id == rid)
        lost = [int(x) for x in (ids or "").replace("#", "").split(", ") if x]
        c.eq(
            "external: failed load, N valid, blocks lost hashes", (n, lost), (rep.num_tokens, list(rep.evicted)), where
        )
        c.eq(
            "external: failed load, blocks lost hashes (pool)",
            sum(before.blocks[b][1] is not None for b in lost),
            len(lost),
            where,
        )
    for r, q2, h2 in c.each(
        r"External stats so far: "
        + N
        + r" requests?, "
        + N
        + r" quer(?:y|ies) \(tokens after the local hit\), "
        + N
        + r" hits?",
        t,
    ):
        c.eq(
            "external: stats so far",
            (r, q2, h2),
            (after.stats["external_requests"], after.stats["external_queries"], after.stats["external_hits"]),
            where,
        )
    if connector.kind == "offloading":
        check_cpu(c, trace, k)


def check_cpu(c: Checks, trace: Trace, k: int) -> None:
    step, before, after = trace.steps[k - 1], trace.snapshot_at(k - 1), trace.snapshot_at(k)
    es = step.engine_step
    assert es is not None and trace.scenario.connector is not None and after.cpu_tier is not None
    t = plain(cpu_tier_html(es.connector, after, trace.scenario.connector.cpu_blocks))
    where = (k, t)
    tier_b = {h: ref for h, _, ref in before.cpu_tier or ()}
    tier_a = {h: ref for h, _, ref in after.cpu_tier}
    stores = [r for r in es.connector if r.kind == "cpu_store" and not r.refused]
    said_stored = said_evicted = 0
    for (n,) in c.each(r"store job for " + N + r" blocks? to the CPU tier", t):
        said_stored += n
    for (n,) in c.each(r"a store of " + N + r" blocks? is refused", t):
        c.eq(
            "cpu: a store of N blocks is refused",
            n,
            len(next(r for r in es.connector if r.kind == "cpu_store" and r.refused).hashes),
            where,
        )
    if stores:
        said_evicted = sum(len(r.cpu_evicted) for r in stores)
        new = {h for r in stores for h in r.hashes} - set(tier_b)
        c.eq("cpu: store jobs for N blocks", said_stored, sum(len(r.hashes) for r in stores), where)
        c.eq("cpu: tier grew by the stores less the evicted", len(tier_a) - len(tier_b), len(new) - said_evicted, where)
    for rid, n, pairs in c.each(r"(\S+): load job from the CPU tier, " + N + r" chunks? into GPU blocks: ([^\n]*)", t):
        rep = next(r for r in es.connector if r.kind == "cpu_load" and r.request_id == rid)
        c.eq("cpu: load job of N chunks", (n, pairs.count("→")), (len(rep.hashes), min(len(rep.hashes), 64)), where)
        c.eq("cpu: load job of N chunks (tier)", all(h in tier_b for h in rep.hashes), True, where)
    for (n,) in c.each(N + r" chunks? written \(BlockStored, medium CPU\)", t):
        done = sum(1 for h, ref in tier_a.items() if ref >= 0 and tier_b.get(h, -1) < 0)
        cpu_stored = sum(
            len(e.block_hashes) for e in step.events if type(e).__name__ == "BlockStored" and e.medium == "CPU"
        )
        c.eq("cpu: N chunks written", (n, n), (done, cpu_stored), where)
    for (n,) in c.each(N + r" chunks? loaded", t):
        c.eq(
            "cpu: N chunks loaded",
            n,
            sum(len(r.cpu_loaded) for r in es.connector if r.kind == "cpu_done"),
            where,
        )
    for n, cap, lost in c.each(
        r"CPU tier: "
        + N
        + r" of "
        + N
        + r" chunks, least recently used first \(.*?lost by the GPU cache: "
        + N
        + r"\)",
        t,
    ):
        on_gpu = {h for h, _ in after.cached}
        c.eq(
            "cpu: tier holds N of C chunks, L lost by the GPU",
            (n, cap, lost),
            (len(tier_a), trace.scenario.connector.cpu_blocks, sum(h not in on_gpu for h in tier_a)),
            where,
        )
