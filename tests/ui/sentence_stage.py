"""The count checks of tests/ui/test_sentences.py for the stage's three record panels: the engine
step's batch (the budget, each scheduled request's tokens, the tokens in flight, preemptions,
the KV event batch), the KV cache groups (each group's hit, the fixed point's passes, the
reconciled hit, the blocks freed below a window, retention) and speculative decoding (the
block EAGLE dropped, the lookahead slots, the drafts verified). Each is read from the HTML the
stage draws (tags stripped, one line per row, cells split by " | ") and compared with the
snapshots around the step where they hold the number, else with the step's own records.
"""

from __future__ import annotations

import html
import re

from explorer.scenario.records import (
    AdmissionCheck,
    CachedBlock,
    DraftsVerified,
    EagleDropped,
    GroupLookup,
    Lookup,
    Popped,
    Retention,
    SkippedFreed,
)
from explorer.scenario.trace import Trace
from explorer.view.stage_panels import phase_panels
from tests.ui.sentence_checks import Checks, N, _count_ids, event_counts


def drawn(markup: str) -> str:
    """The drawn text: rows (div, tr, li) on lines of their own, table cells split by " | "."""
    t = re.sub(r"</t[dh]>", " | ", markup)
    t = re.sub(r"<(?:div|tr|li)\b[^>]*>", "\n", t)
    t = re.sub(r"</span>", " ", t)
    return re.sub(r"(?m)^ +", "", html.unescape(re.sub(r"<[^>]+>", "", t)))


def stage_boxes(trace: Trace, k: int) -> dict[str, str]:
    """The drawn text of step k's batch, groups and spec_decode boxes (those the stage draws)."""
    out = {}
    for p in phase_panels(trace, k, set(), {}):
        m = re.match(r'<section class="px-box st-key-px_panel_(\w+)">', str(p))
        if m and m.group(1) in ("batch", "groups", "spec_decode"):
            out[m.group(1)] = drawn(str(p))
    return out


def check_stage_boxes(c: Checks, trace: Trace, k: int, caching: str) -> None:
    boxes = stage_boxes(trace, k)
    step = trace.steps[k - 1]
    if "batch" in boxes:
        check_batch(c, trace, k, boxes["batch"])
    else:
        c.eq("batch: drawn for every step op", step.op.op == "step" and step.engine_step is not None, False, k)
    if "groups" in boxes:
        check_groups(c, trace, k, boxes["groups"])
    if "spec_decode" in boxes:
        check_spec(c, trace, k, boxes["spec_decode"])
    check_group_indexes(c, trace, k, caching)


def check_batch(c: Checks, trace: Trace, k: int, t: str) -> None:
    step, before, after = trace.steps[k - 1], trace.snapshot_at(k - 1), trace.snapshot_at(k)
    es, sched, bs = step.engine_step, trace.scenario.sched, trace.scenario.engine.block_size
    assert es is not None and sched is not None
    where = (k, t)
    for kind, budget, seqs in c.each(
        r"Batch · (sync|async) scheduler, max_num_batched_tokens = " + N + r", max_num_seqs = " + N, t
    ):
        c.eq(
            "batch: scheduler, budget, max_num_seqs",
            (kind, budget, seqs),
            (sched.scheduler, sched.max_num_batched_tokens, sched.max_num_seqs),
            where,
        )
    used = sum(es.scheduled.values())
    for u, b, n in c.each(N + r" of max_num_batched_tokens = " + N + r" tokens scheduled \(" + N + r" requests?\)", t):
        c.eq(
            "batch: U of budget B scheduled (R requests)",
            (u, b, n),
            (used, sched.max_num_batched_tokens, len(es.scheduled)),
            where,
        )
    for (left,) in c.each(r"(?m)" + N + r" left $", t):
        c.eq("batch: unused budget, N left", left, sched.max_num_batched_tokens - used, where)
    async_sched = sched.scheduler == "async"
    cols = r" \| ".join(
        [r"(\S+)", N, r"(prefill chunk|prefill \(last chunk\)|decode)", N] + ([N] if async_sched else [])
    )
    for row in c.each(r"(?m)^" + cols + r" \| ([^|\n]*) \| $", t):
        rid, tokens, kind, comp = row[:4]
        ph, got = (row[4], str(row[5])) if async_sched else (0, str(row[4]))
        s = next(x for x in es.batch if x.request_id == rid)
        req_b, req_a = before.request(rid), after.request(rid)
        start = comp - tokens  # computed before the schedule (async: placeholders included)
        prompt = (req_a or req_b).num_prompt_tokens  # type: ignore[union-attr]
        known = (req_b or req_a).num_tokens  # type: ignore[union-attr]
        c.eq(
            "batch: row tokens, kind, computed after, placeholders",
            (tokens, ph, kind == "prefill chunk", comp),
            (es.scheduled[rid], s.num_placeholders, comp < known, s.num_computed_tokens),
            where,
        )
        if kind == "decode":
            c.eq("batch: row tokens, kind, computed after, placeholders", (tokens, start >= prompt), (1, True), where)
        # before the step the request had computed `start` tokens, hits included (sync: no tokens in flight)
        if req_b is not None and not async_sched and req_b.status == "running" and rid not in step.preempted:
            c.eq("batch: row computed after = before + scheduled", start, req_b.num_computed_tokens, where)
        if req_a is not None and not async_sched and not any(d.request_id == rid for d in step.of(DraftsVerified)):
            c.eq("batch: row computed after = after's", comp, req_a.num_computed_tokens, where)
        out = es.outputs.get(rid, ())
        shown = [] if got.strip() == "-" else got.strip().removesuffix(" ...").split(", ")
        c.eq(
            "batch: row sampled tokens delivered",
            (len(shown), got.strip().endswith("...")),
            (min(len(out), 8), len(out) > 8),
            where,
        )
        if req_a is not None and req_b is not None and not async_sched and not step.of(DraftsVerified):
            c.eq("batch: row sampled tokens delivered (grew)", len(out), req_a.num_tokens - req_b.num_tokens, where)
    for (more,) in c.each(r"\.\.\. and " + N + r" more", t):
        c.eq("batch: and N more rows", more, len(es.batch) - 64, where)
    for rid, known, ph in c.each(
        r"(?m)^(\S+): " + N + r" tokens known when this batch was planned, " + N + r" in flight", t
    ):
        s = next(x for x in es.batch if x.request_id == rid)
        req_b = before.request(rid)
        c.eq(
            "batch: in flight, K known, P in flight",
            (known, ph),
            ((req_b or after.request(rid)).num_tokens, s.num_placeholders),
            where,
        )  # type: ignore[union-attr]
    for b, bid, lo, hi, state in c.each(
        r"(?m)^block "
        + N
        + r"(?: \(id "
        + N
        + r"\))?, tokens "
        + N
        + r"\.\."
        + N
        + r": (cached after this step|not cached yet)",
        t,
    ):
        cached = bid is not None and after.blocks[bid][1] is not None
        c.eq(
            "batch: in flight block b (id), tokens lo..hi, cached",
            (lo, hi, state == "cached after this step"),
            (b * bs, b * bs + bs - 1, cached),
            where,
        )
    for (rid,) in c.each(r"(?m)^(\S+) preempted: ", t):
        c.eq("batch: R preempted", rid in step.preempted and after.request(rid).status != "running", True, where)  # type: ignore[union-attr]
    for rid, n_tok, new, e, r, free in c.each(
        r"allocate_slots\((\S+), "
        + N
        + r" tokens\): "
        + N
        + r" new \+ "
        + N
        + r" free hit blocks = "
        + N
        + r" > "
        + N
        + r" free → None",
        t,
    ):
        refused = [a for a in step.of(AdmissionCheck) if a.request_id == rid and not a.ok]
        c.eq(
            "batch: refused allocate_slots n + e = r > free",
            (new + e, r > free, True),
            (
                r,
                True,
                any((a.num_new_tokens, a.num_required_blocks, a.num_free_blocks) == (n_tok, r, free) for a in refused),
            ),
            where,
        )
    for (names,) in c.each(r"finished in this step's update: ([^\n]*)", t):
        gone = [x.strip() for x in names.split(",")]
        c.eq(
            "batch: finished R",
            (gone, [r for r in gone if after.request(r) is not None]),
            (list(es.finished[:64]), []),
            where,
        )
    items = re.findall(
        r"(?m)^([A-Z]\w+)(?:: " + N + r" block hash(?:es)?)? ?(?:\(|$)", t[t.find("The KV event batch") :]
    )
    if "No KV event batch: this step published nothing." in t:
        c.eq("batch: event batch, one line per event", len(step.events), 0, where)
    elif items:
        said = [(name, int(n.replace(",", "")) if n else None) for name, n in items]
        rec = [
            (type(e).__name__, len(e.block_hashes) if isinstance(getattr(e, "block_hashes", None), list) else None)
            for e in step.events[:40]
        ]
        c.eq("batch: event batch, one line per event", said, rec, where)
        c.eq(
            "batch: event batch, one line per event",
            event_counts(" ".join(f"1 {n}" for n, _ in said))
            <= event_counts(" ".join(f"1 {type(e).__name__}" for e in step.events)),
            True,
            where,
        )
    for (more,) in c.each(r"(?m)^\.\.\. " + N + r" more", t):
        c.eq("batch: event batch, N more", more, len(step.events) - 40, where)


def check_groups(c: Checks, trace: Trace, k: int, t: str) -> None:
    step, before, after = trace.steps[k - 1], trace.snapshot_at(k - 1), trace.snapshot_at(k)
    groups = trace.scenario.groups
    assert groups is not None
    where = (k, t)
    for part in re.split(r"(?m)^(?=\S+: each group alone)", t)[1:]:
        rid = part.split(":", 1)[0]
        lk = next(g for g in step.of(GroupLookup) if g.request_id == rid)
        hits = {}
        for gid, kind, size, hit in c.each(
            r"(?m)^group (\d+) \((full attention|window \d+), (\d+)-token blocks\) \| " + N + r" \| ", part
        ):
            spec = groups.groups[gid]
            c.eq(
                "groups: each group alone, hit H",
                (kind, size, hit % size),
                (
                    "full attention" if spec.sliding_window is None else f"window {spec.sliding_window}",
                    spec.block_size,
                    0,
                ),
                where,
            )
            hits[gid] = hit
        c.eq("groups: each group alone, hit H", hits, dict(enumerate(lk.group_hit_tokens)), where)
        for (p,) in c.each(r"the fixed point, " + N + r" pass\(es\)", part):
            calls = re.findall(r"(?m)^(\d+) \| group [^|]*\| at most ([\d,]+) \| ([\d,]+) \| ", part)
            c.eq(
                "groups: the fixed point, P passes",
                (p, max((int(x) for x, _, _ in calls), default=p)),
                (lk.num_passes, lk.num_passes),
                where,
            )
            said = [(int(a), int(m.replace(",", "")), int(h.replace(",", ""))) for a, m, h in calls]
            c.eq(
                "groups: the fixed point, P passes",
                said,
                [(x.pass_index, x.max_length, x.hit_tokens) for x in lk.calls],
                where,
            )
            c.eq("groups: the fixed point, P passes", all(h <= m for _, m, h in said), True, where)
        for hit, spb in c.each(r"reconciled hit " + N + r" tokens; shared_prefix_boundary " + N, part):
            longest = max(lk.group_hit_tokens)
            c.eq(
                "groups: reconciled hit H, shared_prefix_boundary S",
                (hit, spb, hit <= longest),
                (lk.hit_tokens, lk.shared_prefix_boundary, True),
                where,
            )
            # the reconciled hit is where the request's first scheduled token starts
            s = next((x for x in step.engine_step.batch if x.request_id == rid), None) if step.engine_step else None
            if (
                s is not None
                and trace.scenario.connector is None
                and before.request(rid) is not None
                and before.request(rid).num_computed_tokens == 0
            ):  # type: ignore[union-attr]
                c.eq(
                    "groups: reconciled hit is where the schedule starts",
                    hit,
                    s.num_computed_tokens - s.num_tokens,
                    where,
                )
            if step.last(Lookup) is not None and step.op.op == "admit":
                c.eq("groups: reconciled hit is where the schedule starts", hit, step.last(Lookup).hit_tokens, where)
    rows = re.findall(
        r"(?m)^(\S+) group (\d+): freed below the window, last skipped first \(before the capacity check\) ([^\n]*)", t
    )
    said = [(rid, int(gid), [int(b) for b in re.findall(r"(\d+) [A-Z]", chips)]) for rid, gid, chips in rows]
    c.eq(
        "groups: R group g freed below the window, blocks",
        said,
        [(r.request_id, r.group_id, list(r.block_ids)) for r in step.of(SkippedFreed)],
        where,
    )
    popped = {p.block_id for p in step.of(Popped)}
    for rid, gid, ids in said:
        req_a = after.request(rid)
        if req_a is not None:  # none of them is in the group's block table any more, unless popped again
            c.eq(
                "groups: R group g freed below the window, blocks",
                set(ids) & set(req_a.block_ids_by_group[gid]) - popped,
                set(),
                where,
            )
    rows = list(c.each(r"(?m)^(\S+) group (\d+): " + N + r" of " + N + r" hashed ([^\n]*)", t))
    c.eq(
        "groups: retention, x of y hashed",
        [(rid, gid) for rid, gid, *_ in rows],
        [(r.request_id, r.group_id) for r in step.of(Retention)],
        where,
    )
    for (rid, gid, x, y, marks), r in zip(rows, step.of(Retention), strict=True):
        said = re.findall(r"(\d+)(✓|–)", marks)
        c.eq(
            "groups: retention, x of y hashed",
            (x, y, [int(i) for i, _ in said], sum(m == "✓" for _, m in said)),
            (sum(r.mask), len(r.mask), list(range(r.start_block, r.start_block + len(r.mask))), x),
            where,
        )
        req_a = after.request(rid)
        if req_a is not None:  # every block marked hashed has a hash after the step
            table = req_a.block_ids_by_group[gid]
            kept = [int(i) for i, m in said if m == "✓" and int(i) < len(table) and table[int(i)]]
            c.eq(
                "groups: retention, marked blocks hashed",
                all(after.blocks[table[i]][1] is not None for i in kept),
                True,
                where,
            )


def check_spec(c: Checks, trace: Trace, k: int, t: str) -> None:
    step, before, after = trace.steps[k - 1], trace.snapshot_at(k - 1), trace.snapshot_at(k)
    spec, bs = trace.scenario.speculative, trace.scenario.engine.block_size
    assert spec is not None
    where = (k, t)
    for method, n, drop, la in c.each(
        r"Speculative decoding · (\S+), "
        + N
        + r" drafts a step: (drops the last block of every hit|drops no hit block), "
        + N
        + r" lookahead slots",
        t,
    ):
        c.eq(
            "spec: method, k drafts, drop, lookahead",
            (method, n, drop.startswith("drops the last"), la),
            (spec.method, spec.num_speculative_tokens, spec.use_eagle_block_drop(), spec.num_lookahead_tokens),
            where,
        )
    said = []
    for who, m, tokens, index, bid, hit in c.each(
        r"(?m)^(\S+): the lookup matched "
        + N
        + r" blocks? \("
        + N
        + r" tokens\); EAGLE drops the last, the request's block "
        + N
        + r", pool block #"
        + N
        + r" ?: the hit is "
        + N
        + r" tokens",
        t,
    ):
        c.eq(
            "spec: matched M blocks (T tokens), dropped block i #b, hit H",
            (m, tokens, hit, before.blocks[bid][1] is not None or bid in {cb.block_id for cb in step.of(CachedBlock)}),
            (index + 1, m * bs, tokens - bs, True),
            where,
        )
        # one drop, no hybrid groups (whose reconciled hit may be shorter): the lookup's hit
        lk = step.last(Lookup)
        if lk is not None and len(step.of(EagleDropped)) == 1 and trace.scenario.groups is None:
            c.eq("spec: matched M blocks (T tokens), dropped block i #b, hit H", hit, lk.hit_tokens, where)
        # the request's first scheduled token is where its hit ends (no connector adds to it)
        es = step.engine_step
        s = next((x for x in es.batch if x.request_id == who), None) if es is not None else None
        req_b = before.request(who)
        if s is not None and trace.scenario.connector is None and (req_b is None or req_b.num_computed_tokens == 0):
            c.eq(
                "spec: R's hit after the drop is where its schedule starts",
                hit,
                s.num_computed_tokens - s.num_tokens,
                where,
            )
        said.append((who, index, bid))
    rec = [(d.request_id, d.block_index, d.block_id) for d in step.of(EagleDropped)[:40]]
    c.eq("spec: matched M blocks (T tokens), dropped block i #b, hit H", said, rec, where)
    for rid, slots, sched_end, la, known, these, of, bar in c.each(
        r"(?m)^(\S+): slots for "
        + N
        + r" positions = "
        + N
        + r" scheduled \+ "
        + N
        + r" lookahead; only (?:the "
        + N
        + r" known tokens can be hashed \(the cache stops at num_tokens\)|these "
        + N
        + " of the "
        + N
        + r" known tokens can be hashed \(the cache stops at the scheduled tokens\))\.\n?([^\n]*)",
        t,
    ):
        if known is None:  # a chunk short of the known tokens: only the scheduled ones are cached
            c.eq("spec: slots, only these S of the K known tokens", (these, these <= of), (sched_end, True), where)
            known = of
        a = next(
            a
            for a in step.of(AdmissionCheck)
            if a.request_id == rid
            and a.ok
            and not a.full_sequence
            and a.num_computed_tokens + a.num_new_tokens == sched_end
        )
        req_b = before.request(rid)
        c.eq(
            "spec: slots P = S scheduled + L lookahead, K known",
            (slots, sched_end + la, la),
            (a.num_tokens_need_slot, slots, a.num_lookahead_tokens),
            where,
        )
        if req_b is not None:
            c.eq("spec: slots P = S scheduled + L lookahead, K known", known, req_b.num_tokens, where)
        parts = dict((w, int(n.replace(",", ""))) for n, w in re.findall(N + r" (tokens|drafts|lookahead)", bar))
        known_n = min(sched_end, known)
        for w, n in parts.items():
            c.eq(
                "spec: the slot bar's segments",
                n,
                {"tokens": known_n, "drafts": sched_end - known_n, "lookahead": la}[w],
                where,
            )
    for rid, n, acc, rej, comp in c.each(
        r"(?m)^(\S+): "
        + N
        + r" drafts verified: "
        + N
        + r" accepted, "
        + N
        + r" rolled back; num_computed_tokens is "
        + N,
        t,
    ):
        d = next(d for d in step.of(DraftsVerified) if d.request_id == rid and not d.placeholders)
        c.eq(
            "spec: N drafts verified, a accepted, r rolled back, computed C",
            (n, acc + rej, acc, comp),
            (d.num_drafts, n, d.num_accepted, d.num_computed_tokens),
            where,
        )
        req_a = after.request(rid)
        if req_a is not None and n <= spec.num_speculative_tokens:
            c.eq(
                "spec: N drafts verified, a accepted, r rolled back, computed C", comp, req_a.num_computed_tokens, where
            )
    for rid, n in c.each(r"(?m)^(\S+): " + N + r" placeholder drafts \(an admission padded to 1 \+ k tokens\)", t):
        d = next(d for d in step.of(DraftsVerified) if d.request_id == rid and d.placeholders)
        c.eq("spec: N placeholder drafts", (n, n), (d.num_drafts, spec.num_speculative_tokens), where)


def check_group_indexes(c: Checks, trace: Trace, k: int, caching: str) -> None:
    """With hybrid groups the caching sentence names each index's group: the indexes it lists
    for a group are those the group's cache_blocks cached, and each is a block of that group's
    table (the request's, after the step) that has a hash."""
    step, after = trace.steps[k - 1], trace.snapshot_at(k)
    if trace.scenario.groups is None or not step.of(CachedBlock):
        return
    m = re.search(
        r"[Bb]locks? ([\d, \-a-z]*?) (?:of \S+ were cached|gets? (?:their hashes|its hash)|\.\.\.|\))", caching
    )
    if m is None:
        return
    said = {int(g): _count_ids(ids) for ids, g in re.findall(r"(\d[\d, \-]*?) in group (\d+)", m.group(1))}
    rec: dict[int, int] = {}
    for cb in step.of(CachedBlock)[: 12 if "block indexes" in caching else None]:
        rec[cb.group_id] = rec.get(cb.group_id, 0) + 1
    c.eq("caching: indexes per group", said, rec, (k, caching))
    req = after.request(step.op.id or "")
    if req is not None and step.op.op != "step":
        for cb in step.of(CachedBlock):
            table = req.block_ids_by_group[cb.group_id]
            c.eq(
                "caching: indexes per group (the group's table)",
                (table[cb.index] in (0, cb.block_id), after.blocks[cb.block_id][1] is not None),
                (True, True),
                (k, caching),
            )
