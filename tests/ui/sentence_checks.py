"""The count checks of tests/ui/test_sentences.py: for each template of a sentence that states a
count (the NOW line, the six phase panels, the metrics line, the External tier and CPU tier
panels), the numbers parsed out of the drawn text and compared with the record they describe.

The record is what the core reported: the snapshots on both sides of the step first (free
queue, ref_cnts, hashes, the requests' tokens, blocks and hashes, the stats, the CPU tier), the
step's own records (events, lookup, admission checks, the engine step's batch) where no
snapshot holds the number. `Checks.count` counts the comparisons per template, so that a
template the random scenarios never draw fails loudly.
"""

from __future__ import annotations

import html
import re
from collections import Counter
from collections.abc import Iterator

from explorer.scenario.records import (
    AdmissionCheck,
    CacheCall,
    CachedBlock,
    EagleDropped,
    Freed,
    Lookup,
    Popped,
    SkippedFreed,
)
from explorer.scenario.trace import RequestView, Snapshot, Step, Trace
from explorer.viz.panels_html import eviction_html, free_html
from tests.step_records import evictions, from_free_ids, touched_ids

N = r"(\d[\d,]*)"


def plain(markup: str) -> str:
    """The drawn text: one line per row (a div), tags dropped."""
    return html.unescape(re.sub(r"<[^>]+>", "", re.sub(r"<div[^>]*>", "\n", markup)))


def popped(trace: Trace, k: int) -> int:
    """The blocks step k took out of the free queue by allocation: what left the queue, plus what
    was freed back to it, minus the hit blocks touched out of it. Every free back to the queue
    counts, a block's second one too (in one step a block can be freed below a window, popped
    again and freed again)."""
    s = trace.steps[k - 1]
    before, after = trace.snapshot_at(k - 1), trace.snapshot_at(k)
    freed = sum(1 for f in s.of(Freed) if f.to != "held")
    return before.num_free_blocks - after.num_free_blocks + freed - len(from_free_ids(s))


def newly_hashed(before: Snapshot, after: Snapshot) -> int:
    return sum(1 for b, a in zip(before.blocks, after.blocks, strict=True) if a[1] is not None and a[1] != b[1])


def had_hash(before: Snapshot, ids: list[int]) -> int:
    return sum(1 for b in set(ids) if before.blocks[b][1] is not None)


def held(req: RequestView | None) -> set[int]:
    """The pool blocks a request holds (every group's; 0 is the null block)."""
    if req is None:
        return set()
    groups = req.block_ids_by_group or (req.block_ids,)
    return {b for g in groups for b in g if b != 0}


def num_hashes(req: RequestView | None) -> int:
    return len(req.block_hashes) if req is not None else 0


def event_counts(text: str) -> Counter[str]:
    return Counter({name: int(c.replace(",", "")) for c, name in re.findall(r"(\d[\d,]*) ([A-Za-z]\w*)", text)})


def per_request(text: str) -> dict[str, int]:
    """ "A 12 (decode), B 3" -> {"A": 12, "B": 3}."""
    pat = r"(\S+) ([\d,]+)(?: \((?:[^()]|\([^()]*\))*\))?(?:, |$)"
    return {r: int(n.replace(",", "")) for r, n in re.findall(pat, text)}


class Checks:
    """Counts, per template, the stated counts compared with their record."""

    def __init__(self) -> None:
        self.count: Counter[str] = Counter()

    def eq(self, template: str, said: object, recorded: object, where: object) -> None:
        assert said == recorded, (template, said, recorded, where)
        self.count[template] += 1

    @staticmethod
    def each(pattern: str, text: str) -> Iterator[tuple]:
        """Every match of pattern, its numeric groups as ints (others as they are, or None)."""
        for m in re.finditer(pattern, text):
            yield tuple(int(g.replace(",", "")) if g and re.fullmatch(r"[\d,]+", g) else g for g in m.groups())

    def events(self, template: str, pattern: str, text: str, step: Step, where: object) -> None:
        m = re.search(pattern, text)
        if m:
            self.eq(template, event_counts(m.group(1)), Counter(type(e).__name__ for e in step.events), where)

    def free_split(
        self, template: str, text: str, step: Step, before: Snapshot, after: Snapshot, where: object
    ) -> None:
        """ "F blocks freed ...: a to the front of the free queue, b to the back, h still held": the
        parts add up to F; where no freed block is reused in the step, the free queue grew by a + b
        once the step's pops and touches are put back, and h blocks keep a ref_cnt above 0."""
        pat = (
            N + r" blocks? freed(?: \([^)]*\))?[:,] " + N + r" to the front of the free queue, " + N + r" to the back, "
        )
        for total, front, back, kept in self.each(pat + N + r" still held", text):
            self.eq(template, front + back + kept, total, where)
            ids = [f.block_id for f in step.of(Freed)]
            reused = set(ids) & ({p.block_id for p in step.of(Popped)} | set(touched_ids(step)))
            if not reused and len(set(ids)) == len(ids) == total:
                grew = after.num_free_blocks - before.num_free_blocks + len(step.of(Popped)) + len(from_free_ids(step))
                self.eq(
                    template + " (queue)",
                    (front + back, kept),
                    (grew, sum(after.blocks[b][0] > 0 for b in ids)),
                    where,
                )
                hashes = before if step.op.op == "reset" else after  # a reset drops every hash after the frees
                no_hash = sum(after.blocks[b][0] == 0 and hashes.blocks[b][1] is None for b in ids)
                self.eq(template + " (front)", front, no_hash, where)


def check_manager_step(c: Checks, trace: Trace, k: int, now_text: str, panels: dict[str, str]) -> None:
    """A manager-level step (or an engine-step scenario's arrive / reset, drawn the same way
    where the texts match)."""
    step, before, after = trace.steps[k - 1], trace.snapshot_at(k - 1), trace.snapshot_at(k)
    op, where = step.op, (k, now_text, panels)
    rid = op.id or ""
    req_b, req_a = before.request(rid), after.request(rid)
    t = now_text
    for n, full in c.each(
        r"arrives with " + N + r" tokens? \((?:typed text, )?" + N + r" blocks?(?: of \d+ tokens)? hashed", t
    ):
        c.eq("now: arrives with N tokens (F blocks hashed)", (n, full), (req_a.num_tokens, num_hashes(req_a)), where)
    for (n,) in c.each(r"arrives with " + N + r" tokens?; prefix caching is off", t):
        c.eq("now: arrives with N tokens (no hashes)", (n, num_hashes(req_a)), (req_a.num_tokens, 0), where)
    for hit, n in c.each(r"hits " + N + r" of its " + N + r" tokens", t):
        assert step.last(Lookup) is not None
        c.eq("now: hits H of its N tokens", (hit, n), (step.last(Lookup).hit_tokens, req_a.num_tokens), where)
    for new, a, b in c.each(
        r"gets " + N + r" new blocks?; the free queue goes from " + N + r" to " + N + r" blocks", t
    ):
        c.eq(
            "now: N new blocks; free queue A to B",
            (new, a, b),
            (popped(trace, k), before.num_free_blocks, after.num_free_blocks),
            where,
        )
    for new, e, r, verdict, free in c.each(
        r"" + N + r" new \+ " + N + r" free hit blocks = " + N + r" (<=|>) " + N + r" free", t
    ):
        # a window group frees blocks below its window before the check: then the queue is longer
        at_check = free if step.of(Freed) or step.of(SkippedFreed) else before.num_free_blocks
        c.eq(
            "now: admission check n + e = r vs free", (new + e, verdict == "<=", free), (r, r <= free, at_check), where
        )
        if not step.ok:
            c.eq("now: admission check n + e = r vs free", after.num_free_blocks, before.num_free_blocks, where)
    pat = r"(?:generates " + N + r"(?: of the [\d,]+ tokens? asked)?|computes its pending tokens)"
    for got, calls, new, cached in c.each(
        pat + r": " + N + r" allocate_slots calls?, " + N + r" new blocks?, " + N + r" blocks? cached", t
    ):
        grew = (req_a.num_tokens - req_b.num_tokens) if got is not None and req_a and req_b else got
        c.eq(
            "now: generate/decode: calls, new blocks, cached",
            (got, calls, new, cached),
            (grew, len(step.of(AdmissionCheck)), popped(trace, k), newly_hashed(before, after)),
            where,
        )
    if op.op == "sample" and req_a is not None and req_b is not None:
        made = num_hashes(req_a) - num_hashes(req_b)
        for (n,) in c.each(r"(?:samples|gets) " + N + r" tokens?", t):
            c.eq("now: samples N tokens", n, req_a.num_tokens - req_b.num_tokens, where)
        for (n,) in c.each(N + r" new block hash(?:es)? exists? now", t):
            c.eq("now: N new block hashes exist", n, made, where)
        if "no new hash" in t:
            c.eq("now: no new hash", made, 0, where)
        for acc, drafts, rej, comp in c.each(
            N + r" accepted of the " + N + r" drafts .*?; " + N + r" rejected, rolled back to num_computed_tokens " + N,
            t,
        ):
            c.eq("now: drafts accepted/rejected", (acc + rej, comp), (drafts, req_a.num_computed_tokens), where)
    if op.op in ("finish", "preempt"):
        for (total,) in c.each(r"(?:finishes|is preempted): " + N + r" blocks? freed", t):
            c.eq("now: finish/preempt frees F blocks", total, len(held(req_b)), where)
        c.free_split("now: a front, b back, h held", t, step, before, after, where)
    c.events("now: Events: counts", r"Events: (.*)\.", t, step, where)
    check_manager_panels(c, trace, k, panels, where)


def check_manager_panels(c: Checks, trace: Trace, k: int, panels: dict[str, str], where: object) -> None:
    step, before, after = trace.steps[k - 1], trace.snapshot_at(k - 1), trace.snapshot_at(k)
    rid = step.op.id or ""
    req_b, req_a = before.request(rid), after.request(rid)
    bs, hbs = trace.scenario.engine.block_size, trace.scenario.hash_block_size
    t = panels.get("hashing", "")
    for n, full, size in c.each(r"has " + N + r" tokens?: " + N + r" blocks? of (\d+) tokens", t):
        c.eq("hashing: N tokens, F full blocks", (n, full, size), (req_a.num_tokens, num_hashes(req_a), hbs), where)
    for n, full, size in c.each(r"arrives with " + N + r" tokens?, " + N + r" blocks? of (\d+) when full", t):
        c.eq(
            "hashing: caching off, F blocks when full",
            (n, full, size, num_hashes(req_a)),
            (req_a.num_tokens, n // bs, bs, 0),
            where,
        )
    for last, n in c.each(r"so block " + N + r"'s hash stands for all " + N + r" tokens", t):
        c.eq(
            "hashing: block F-1 stands for F x bs tokens",
            (last + 1, n),
            (num_hashes(req_a), num_hashes(req_a) * hbs),
            where,
        )
    for out, n, full, ids in c.each(
        N + r" output tokens? took \S+ to " + N + r" tokens?, and " + N + r" blocks? became full: blocks? (.*?) got", t
    ):
        b0, b1 = num_hashes(req_b), num_hashes(req_a)
        c.eq(
            "hashing: T output tokens, N tokens, F blocks full",
            (out, n, full, ids),
            (req_a.num_tokens - req_b.num_tokens, req_a.num_tokens, b1 - b0, _range(b0, b1)),
            where,
        )
    t = panels.get("lookup", "")
    lk = step.last(Lookup)
    if lk is not None:
        for n, size, cap in c.each(r"\(" + N + r" - 1\) // (\d+) = " + N + r" blocks?", t):
            c.eq("lookup: (N - 1) // bs = cap", (n, (n - 1) // size), (lk.num_tokens, cap), where)
        for hits, size, hit in c.each(r"hit = " + N + r" x (\d+) = " + N + r" tokens", t):
            c.eq("lookup: hit = h x bs", hits * size, hit, where)
            if not step.of(EagleDropped) and trace.scenario.groups is None:
                c.eq("lookup: hit = h x bs", hit, lk.hit_tokens, where)
        if "hit = 0 tokens" in t or "hit is 0 tokens" in t:
            c.eq("lookup: hit = 0 tokens", lk.hit_tokens, 0, where)
        for (rest,) in c.each(r"the other " + N + r" tokens? are computed", t):
            c.eq("lookup: the other N tokens are computed", rest, lk.num_tokens - lk.hit_tokens, where)
        for (hit,) in c.each(r"from the hit: " + N + r" tokens", t):
            c.eq("lookup: EAGLE dropped, hit", hit, lk.hit_tokens, where)
        for ng, hit in c.each(r"the hit all " + N + r" KV cache groups agree on is " + N + r" tokens", t):
            assert trace.scenario.groups is not None
            c.eq("lookup: groups agree on", (ng, hit), (len(trace.scenario.groups.groups), lk.hit_tokens), where)
        for (n,) in c.each(r"so all " + N + r" tokens? will be computed", t):
            c.eq("lookup: skipped, all N tokens computed", n, lk.num_tokens, where)
    t = panels.get("allocate", "")
    pat = (
        r"needs " + N + r" new blocks? for tokens up to [\d,]+ plus " + N + r" hit blocks? waiting in the free queue: "
    )
    for new, e, new2, e2, r, verdict, free, ok in c.each(
        pat + N + r" \+ " + N + r" = " + N + r" (<=|>) " + N + r" free, so it (succeeds|returns None)", t
    ):
        at_check = free if step.of(Freed) or step.of(SkippedFreed) else before.num_free_blocks  # (as above)
        c.eq(
            "allocate: n + e = r vs free",
            (new2, e2, new + e, verdict == "<=", ok == "succeeds", free),
            (new, e, r, r <= free, step.ok, at_check),
            where,
        )
    for (n,) in c.each(r"a chunk of " + N + r" tokens?", t):
        c.eq("allocate: a chunk of N tokens", n, step.of(AdmissionCheck)[0].num_new_tokens, where)
    for (n,) in c.each(N + r" new blocks? (?:was|were) needed", t):
        c.eq("allocate: N new blocks were needed", n, popped(trace, k), where)
    if "the last block still had room" in t:
        c.eq("allocate: no new block needed", popped(trace, k), 0, where)
    for calls, grew in c.each(
        N + r" decode steps? each called allocate_slots for the pending token; " + N + r" of them", t
    ):
        c.eq(
            "allocate: K decode steps, G grew",
            (calls, grew <= popped(trace, k)),
            (len(step.of(AdmissionCheck)), True),
            where,
        )
        if trace.scenario.groups is None:
            c.eq("allocate: K decode steps, G grew", grew, popped(trace, k), where)
    for total, rest in c.each(r"touch\(\) first adds 1 to the ref_cnt of the " + N + r" hit blocks?: ([^.]*)\.", t):
        m = re.search(N + r" left the free queue", rest)
        s = re.search(N + r" (?:was|were) in use", rest)
        from_free = int(m.group(1).replace(",", "")) if m else 0
        shared = int(s.group(1)) if s else 0
        zero = sum(1 for b in touched_ids(step) if before.blocks[b][0] == 0)
        c.eq(
            "allocate: touch() H hit blocks, x from free, y shared",
            (total, from_free, shared),
            (len(touched_ids(step)), zero, len(touched_ids(step)) - zero),
            where,
        )
    for n, _, ev in c.each(
        r"pop " + N + r" blocks? from the head of the free queue: ([^;.]*)(?:; " + N + r" of them still had a hash)?", t
    ):
        c.eq(
            "allocate: pop N blocks (E had a hash)",
            (n, ev or 0),
            (popped(trace, k), had_hash(before, [p.block_id for p in step.of(Popped)])),
            where,
        )
    t = panels.get("caching", "")
    # a hash lost and got in place
    rehashed = {cb.block_id for cb in step.of(CachedBlock)} & {b for b, _ in evictions(step)}
    if t and not rehashed:
        c.eq("caching: cached blocks", len(step.of(CachedBlock)), newly_hashed(before, after), where)
    pat = (
        r"min\("
        + N
        + r" \+ "
        + N
        + r", "
        + N
        + r"\) = "
        + N
        + r" tokens(?:; cache_blocks gets "
        + N
        + r" of them for group 0)?"
    )
    groups = trace.scenario.groups
    gbs = bs if groups is None else groups.groups[0].block_size
    for a, b, n, m, passed, full in c.each(pat + r", so its first ([\d,]+ blocks are|block is) full", t):
        f = 1 if full == "block is" else int(full.split()[0].replace(",", ""))
        t2 = step.of(CacheCall)[0].num_tokens
        c.eq(
            "caching: min(c + n, N) = t, t // bs full",
            (min(a + b, n), n, passed or m, f),
            (m, req_a.num_tokens, t2, t2 // gbs),
            where,
        )
    for (ids,) in c.each(r"Blocks? (.*?) gets? (?:their hashes|its hash) now", t):
        c.eq(
            "caching: blocks ... get their hashes",
            _count_ids(ids),
            len(step.of(CachedBlock)) if rehashed else newly_hashed(before, after),
            where,
        )
    for (n,) in c.each(r"As decoding allocated slots, " + N + r" blocks? filled up", t):
        c.eq("caching: decoding filled N blocks", n, newly_hashed(before, after), where)
    for (n,) in c.each(N + r" blocks? had an identical cached twin", t):
        # a hash's blocks in the order they were cached (with groups: per group, its key)
        entries = after.cached_by_group or tuple((0, h, ids) for h, ids in after.cached)
        first = {b: ids[0] for _, _, ids in entries for b in ids}
        c.eq(
            "caching: N blocks had a twin",
            n,
            sum(1 for cb in step.of(CachedBlock) if first.get(cb.block_id, cb.block_id) != cb.block_id),
            where,
        )
    for (n,) in c.each(N + r" BlockStored events? announces?", t):
        c.eq("caching: N BlockStored events", n, sum(type(e).__name__ == "BlockStored" for e in step.events), where)
    t = panels.get("free", "")
    for (n,) in c.each(r"hands back its " + N + r" blocks?", t):
        c.eq("free: hands back its N blocks", n, len(held(req_b)), where)
    states = free_states(c, trace, k, t, where)
    if states is None:
        return check_eviction(c, trace, k, panels.get("eviction", ""), where)  # a block freed and reused
    for (n,) in c.each(N + r" blocks? without a hash \(", t):
        c.eq("free: N blocks without a hash to the front", n, states["front"], where)
    for (n,) in c.each(N + r" hashed blocks? \(", t):
        c.eq("free: N hashed blocks to the back", n, states["back"], where)
    for (n,) in c.each(N + r" blocks? \([^)]*\) (?:is|are) still used by another request", t):
        c.eq("free: N blocks still used", n, states["held"], where)
    check_eviction(c, trace, k, panels.get("eviction", ""), where)


def free_states(c: Checks, trace: Trace, k: int, t: str, where: object) -> Counter[str] | None:
    """Where the freed blocks of step k went, from the snapshots (front: no hash, back: hashed,
    held: ref_cnt > 0 after), and the free panel's drawn rows checked against it; None where a
    freed block is reused in the same step (no snapshot tells then)."""
    step, before, after = trace.steps[k - 1], trace.snapshot_at(k - 1), trace.snapshot_at(k)
    ids = [f.block_id for f in step.of(Freed)]
    if (
        not t
        or set(ids) & ({p.block_id for p in step.of(Popped)} | set(touched_ids(step)))
        or len(set(ids)) != len(ids)
    ):
        return None
    hashes = before if step.op.op == "reset" else after  # a reset drops every hash after the frees
    states = Counter(
        "held" if after.blocks[b][0] > 0 else "front" if hashes.blocks[b][1] is None else "back" for b in ids
    )
    body = plain(free_html(step, after, set()))
    drawn = Counter(
        {to: n for n, a, b in c.each(r"(?m)^" + N + r" (?:→ (front|back)|still (held))", body) for to in [a or b]}
    )
    c.eq("free body: N → front / back, N still held", drawn, +states, where)
    return states


def check_eviction(c: Checks, trace: Trace, k: int, t: str, where: object) -> None:
    step, before, after = trace.steps[k - 1], trace.snapshot_at(k - 1), trace.snapshot_at(k)
    if step.op.op == "reset" and step.ok:
        body = plain(eviction_html(step, before, after, set()))
        for (n,) in c.each(r"AllBlocksCleared: " + N + " hashes dropped", body):
            c.eq("eviction body: AllBlocksCleared, N hashes dropped", n, len(before.cached), where)
    for (n,) in c.each(r"all " + N + r" cached hash(?:es)? are dropped", t):
        c.eq("eviction: reset drops all N hashes", (n, len(after.cached)), (len(before.cached), 0), where)
    for (n,) in c.each(r"refused: " + N + r" blocks? (?:is|are) still in use", t):
        c.eq(
            "eviction: reset refused, N in use",
            n,
            sum(1 for i, (rc, _) in enumerate(before.blocks) if i and rc > 0),
            where,
        )
    ev_ids = [p.block_id for p in step.of(Popped) if before.blocks[p.block_id][1] is not None]
    for (n,) in c.each(r"popped " + N + r" blocks? (?:that still had a hash|while still cached)", t):
        c.eq("eviction: popped N blocks that had a hash", n, len(set(ev_ids)), where)
    for (n,) in c.each(r"one BlockRemoved: " + N + r" events? this step", t):
        c.eq("eviction: N BlockRemoved events", n, sum(type(e).__name__ == "BlockRemoved" for e in step.events), where)

    def keys(snap: Snapshot) -> set:  # the hash map's keys (with groups: group and hash)
        return {(g, h) for g, h, _ in snap.cached_by_group} if snap.cached_by_group else {h for h, _ in snap.cached}

    gone = len(keys(before) - keys(after))
    if not {h for _, h in evictions(step)} <= {h for h, _ in before.cached}:
        return  # a hash cached and evicted within the op (a window's blocks): no snapshot holds it
    for (n,) in c.each(r"(?:Their )?" + N + r" (?:hash(?:es)?|entr(?:y|ies)) left the hash map", t):
        c.eq("eviction: N hashes left the hash map", n, gone, where)


def _range(a: int, b: int) -> str | int:
    return a if b - a == 1 else f"{a}-{b - 1}"


def _count_ids(text: str | int) -> int:
    """ "0-3, 7" -> 5; with groups "0-3 in group 0, 5 in group 1" -> 5."""
    n = 0
    for part in re.sub(r" in group \d+", "", str(text)).split(", "):
        lo, _, hi = part.partition("-")
        n += abs(int(hi) - int(lo)) + 1 if hi else 1
    return n


def check_summaries(c: Checks, trace: Trace, k: int, summaries: dict[str, str]) -> None:
    """The phase strip's few words per panel ("3 new, 2 touched", "hit 48", "2 cached", ...)."""
    step, before, after = trace.steps[k - 1], trace.snapshot_at(k - 1), trace.snapshot_at(k)
    where = (k, summaries)
    rid = step.op.id or ""
    for (n,) in c.each(r"^" + N + " hashed$", summaries.get("hashing", "")):
        grew = num_hashes(after.request(rid)) - (0 if step.op.op == "arrive" else num_hashes(before.request(rid)))
        c.eq("strip: N hashed", n, grew, where)
    for (n,) in c.each(r"^hit " + N + "$", summaries.get("lookup", "")):
        assert step.last(Lookup) is not None
        c.eq("strip: hit N", n, step.last(Lookup).hit_tokens, where)
    for new, touched in c.each(r"^" + N + r" new(?:, " + N + " touched)?$", summaries.get("allocate", "")):
        c.eq("strip: N new, T touched", (new, touched or 0), (popped(trace, k), len(touched_ids(step))), where)
    for (n,) in c.each(r"^" + N + r" req\.", summaries.get("allocate", "")):
        c.eq("strip: N req.", n, len({a.request_id for a in step.of(AdmissionCheck)}), where)
    for (n,) in c.each(r"^" + N + " cached$", summaries.get("caching", "")):
        c.eq("strip: N cached", n, len(step.of(CachedBlock)), where)
        if not {cb.block_id for cb in step.of(CachedBlock)} & {b for b, _ in evictions(step)}:
            c.eq("strip: N cached", n, newly_hashed(before, after), where)
    for (n,) in c.each(r"^" + N + " freed$", summaries.get("free", "")):
        if step.op.op in ("finish", "preempt", "abort"):
            c.eq("strip: N freed", n, len(held(before.request(rid))), where)
        else:
            c.eq("strip: N freed", n, len(step.of(Freed)), where)
    for (n,) in c.each(r"^" + N + " evicted$", summaries.get("eviction", "")):
        c.eq(
            "strip: N evicted",
            n,
            len({p.block_id for p in step.of(Popped) if before.blocks[p.block_id][1] is not None}),
            where,
        )
