"""The stage's step panels as HTML: the NOW box and the phase panels of step k (manager-level,
engine-step, hybrid groups, speculative decoding, the external tier), built once per step."""

from __future__ import annotations

from markupsafe import Markup

from explorer.scenario.ops import Arrival
from explorer.scenario.records import AdmissionCheck, GroupLookup, HashedBlock, Lookup, Retention, SkippedFreed
from explorer.scenario.trace import Step, Trace
from explorer.view import lesson_checks
from explorer.view.explain import engine_step
from explorer.view.explain import step as explain
from explorer.view.explain.records import PANEL_TITLES, Panel
from explorer.view.explain.refs import Ref
from explorer.view.html import box, caption_html, details, paragraph_html, text, trusted, warning_html
from explorer.view.why_missed import why_box, why_missed_html
from explorer.viz.cpu_tier_html import cpu_tier_html, jobs_html
from explorer.viz.engine_step_html import (
    batch_table_html,
    budget_bar_html,
    event_batch_html,
    finished_html,
    in_flight_html,
    preempted_html,
)
from explorer.viz.external_tier_html import external_tier_html
from explorer.viz.groups_html import lookup_html as group_lookup_html
from explorer.viz.groups_html import retention_html, skipped_html, step_has_groups
from explorer.viz.panels_html import (
    allocate_html,
    caching_html,
    digest_table_html,
    eviction_html,
    free_html,
    hashing_html,
    lookup_html,
    phase_strip_html,
)
from explorer.viz.spec_decode_html import spec_decode_html

EXTERNAL_REFS = (
    ("Scheduler.schedule: get_num_new_matched_tokens after the local hit", "vllm/v1/core/sched/scheduler.py:924-1009"),
    ("_update_waiting_for_remote_kv (cache the loaded blocks)", "vllm/v1/core/sched/scheduler.py:3052-3097"),
    ("_handle_invalid_blocks (failed loads)", "vllm/v1/core/sched/scheduler.py:3279-3359"),
)
OFFLOADING_REFS = (
    ("OffloadingConnectorScheduler", "vllm/distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py"),
    ("CPUOffloadingManager, LRUCachePolicy", "vllm/v1/kv_offload/cpu/manager.py, cpu/policies/lru.py"),
)
SPEC_REFS = (
    ("find_longest_cache_hit", "single_type_kv_cache_manager.py:834-839"),
    ("allocate_slots", "kv_cache_manager.py:537-541, 603-612"),
    ("update_from_output", "scheduler.py:2051-2069"),
)


def refs_line(refs: tuple[tuple[str, str], ...]) -> Markup:
    return Markup(" ").join(
        Markup("<span class='px-ref'>{} <span class='px-loc'>{}</span></span>").format(text(f), text(loc))
        for f, loc in refs
    )


def _refs(refs: tuple[Ref, ...]) -> Markup:
    return refs_line(tuple((r.func, r.loc) for r in refs))


def draws_engine_step(trace: Trace, k: int) -> bool:
    """Whether step k is an engine step's `step` or `abort` (an `arrive` or `reset` is drawn as
    the manager level draws it)."""
    return trace.scenario.sched is not None and k > 0 and trace.steps[k - 1].op.op in ("step", "abort")


def now_html(trace: Trace, k: int, base_ops: int, off: str | None) -> Markup:
    """The NOW box of step k and, below it, each lesson check that failed."""
    now = (engine_step.now if trace.scenario.sched is not None else explain.now)(trace, k)
    origin = Markup(' <span class="px-tag">playground</span>') if k > base_ops else Markup("")
    extra, failures = lesson_checks.note_and_checks(trace.steps[k - 1], off) if k > 0 else ("", ())
    head = Markup('<div class="px-now" data-px-now="{}"><div class="px-headline">Step {} of {}: {}{}</div>').format(
        k, k, len(trace.steps), text(now.headline), origin
    )
    body = Markup('<div class="px-refs">{}</div><div class="px-now-text">{}</div>{}</div>').format(
        _refs(now.refs), text(now.text), trusted(extra)
    )
    return head + body + Markup("").join(warning_html(f"Lesson check failed: {f}") for f in failures)


def phase_panels(trace: Trace, k: int, changed: set[int], snippets: dict[int, str]) -> list[Markup]:
    """Step k's panels, top to bottom (only those that happened)."""
    out = [_spec_decode(trace, k)]
    if draws_engine_step(trace, k):
        out += _engine_step_panels(trace, k, changed)
    else:
        out += _manager_panels(trace, k, changed, snippets)
    out.append(_groups_step(trace, k))
    return [p for p in out if p]


def _panel_head(p: Panel) -> Markup:
    return Markup('<div class="px-panel-head" data-px-panel="{}">{} · {}</div><div class="px-refs">{}</div>').format(
        p.key, p.number, text(p.title), _refs(p.refs)
    ) + paragraph_html(p.text)


def _manager_panels(trace: Trace, k: int, changed: set[int], snippets: dict[int, str]) -> list[Markup]:
    panels = explain.panels(trace, k)
    out = [trusted(phase_strip_html({p.key: p.summary for p in panels}, PANEL_TITLES))]
    if k == 0:
        return out
    step = trace.steps[k - 1]
    before, after = trace.snapshot_at(k - 1), trace.snapshot_at(k)
    eng = trace.scenario.engine
    bs, ints = eng.block_size, eng.int_block_hashes
    for p in panels:
        body: Markup | str = ""
        if p.key == "hashing" and eng.enable_prefix_caching:
            req = after.request(step.op.id or "") or before.request(step.op.id or "")
            n = len(step.op.prompt) if isinstance(step.op, Arrival) else (req.num_tokens if req else 0)
            parent = None
            hashed = step.of(HashedBlock)
            if hashed and hashed[0].index > 0 and req is not None:
                parent = req.block_hashes[hashed[0].index - 1]
            body = trusted(hashing_html(step, trace.none_hash, parent, n, bs, ints, snippets))
            if len(hashed) > 1:
                body += details(f"All {len(hashed):,} digests in full", digest_table_html(hashed, ints))
        elif p.key == "lookup" and (lk := step.last(Lookup)) is not None:
            body = lookup_html(step, lk.num_tokens // bs, bs)
        elif p.key == "allocate":
            body = allocate_html(step, before, after, changed, None)
        elif p.key == "caching":
            body = caching_html(step, after, changed, None, ints)
        elif p.key == "free":
            body = free_html(step, after, changed, None)
        elif p.key == "eviction":
            body = eviction_html(step, before, after, changed, None, ints)
        out.append(box(p.key, _panel_head(p), body, *_why(trace, step, p.key)))
    return out + _why_alone(trace, step, [p.key for p in panels])


def _why(trace: Trace, step: Step, key: str) -> list[Markup]:
    """The lookup panel's "Why it missed" part (design section 14)."""
    return [why_missed_html(step, trace.scenario.hash_block_size)] if key == "lookup" else []


def _why_alone(trace: Trace, step: Step, keys: list[str]) -> list[Markup]:
    """The part in a box of its own when the step looked up but drew no lookup panel."""
    return [] if "lookup" in keys else [p for p in [why_box(step, trace.scenario.hash_block_size)] if p]


def _engine_step_panels(trace: Trace, k: int, changed: set[int]) -> list[Markup]:
    panels = engine_step.panels(trace, k)
    out = [trusted(phase_strip_html({p.key: p.summary for p in panels}, PANEL_TITLES))]
    step = trace.steps[k - 1]
    if step.op.op == "step":
        out.append(_batch(trace, k))
    before, after = trace.snapshot_at(k - 1), trace.snapshot_at(k)
    eng = trace.scenario.engine
    external: Markup | None = None  # the KV connector's panel goes between lookup and allocation
    for p in panels:
        if external is None and p.key not in ("hashing", "lookup"):
            external = _external(trace, k)
            out.append(external)
        body: Markup | str = ""
        if p.key == "lookup" and (lk := step.last(Lookup)) is not None:
            body = lookup_html(step, lk.num_tokens // eng.block_size, eng.block_size)
        elif p.key == "allocate":
            body = allocate_html(step, before, after, changed, None)
        elif p.key == "caching":
            body = caching_html(step, after, changed, None, eng.int_block_hashes)
        elif p.key == "free":
            body = free_html(step, after, changed, None)
        elif p.key == "eviction":
            body = eviction_html(step, before, after, changed, None, eng.int_block_hashes)
        out.append(box(p.key, _panel_head(p), body, *_why(trace, step, p.key)))
    if external is None:
        out.append(_external(trace, k))
    return out + _why_alone(trace, step, [p.key for p in panels])


def _batch(trace: Trace, k: int) -> Markup:
    step = trace.steps[k - 1]
    es, sched = step.engine_step, trace.scenario.sched
    if es is None or sched is None:
        return Markup("")
    before, after = trace.snapshot_at(k - 1), trace.snapshot_at(k)
    kinds = engine_step.kinds(trace, k)
    async_sched = sched.scheduler == "async"
    refs = (engine_step.ENGINE_REFS["schedule"], engine_step.ENGINE_REFS["update"]) + (
        (engine_step.ENGINE_REFS["async_placeholders"],) if async_sched else ()
    )
    body = Markup(
        '<div class="px-panel-head" data-px-panel="batch">Batch · {} scheduler, max_num_batched_tokens = {}, '
        'max_num_seqs = {}</div><div class="px-refs">{}</div>'
    ).format(sched.scheduler, f"{sched.max_num_batched_tokens:,}", f"{sched.max_num_seqs:,}", _refs(refs))
    body += trusted(budget_bar_html(es.batch, kinds, sched.max_num_batched_tokens))
    body += trusted(batch_table_html(es.batch, kinds, es, async_sched))
    if async_sched:
        flight = in_flight_html(es.batch, before, after, trace.scenario.engine.block_size)
        if flight:
            body += Markup(
                '<div class="px-rowlabel"><b>Tokens in flight</b> (? = a placeholder: a slot, never hashed)</div>'
            ) + trusted(flight)
    failed = [a for a in step.of(AdmissionCheck) if not a.ok] if step.preempted else []
    body += trusted(preempted_html(es.preemption_reasons, failed, step.preempted))
    body += trusted(finished_html(es.finished))
    body += Markup('<div class="px-rowlabel"><b>The KV event batch of this step</b></div>')
    return box("batch", body + trusted(event_batch_html(step.events)))


def _external(trace: Trace, k: int) -> Markup:
    connector = trace.scenario.connector
    step: Step = trace.steps[k - 1]
    es = step.engine_step
    if connector is None or es is None:
        return Markup("")
    before, after = trace.snapshot_at(k - 1), trace.snapshot_at(k)
    stored = sum(type(e).__name__ == "BlockStored" for e in step.events)
    body = trusted(external_tier_html(es.connector, es.external, before, after, stored))
    offloading = connector.kind == "offloading"
    cpu = jobs_html(es.connector) if offloading else ""
    if not body and not cpu:
        return Markup("")
    if offloading:  # the CPU tier beside the GPU pool
        body += Markup('<div class="px-xt">{}</div>').format(
            trusted(cpu_tier_html(es.connector, after, connector.cpu_blocks))
        )
    setting = f"cpu_blocks = {connector.cpu_blocks}" if offloading else f"load = {connector.load}"
    head = Markup(
        '<div class="px-panel-head" data-px-panel="external">External tier · {} connector, {}, failure_policy = {}</div>'
        '<div class="px-refs">{}</div>'
    ).format(
        connector.kind,
        setting,
        connector.failure_policy,
        refs_line(EXTERNAL_REFS + (OFFLOADING_REFS if offloading else ())),
    )
    words = (
        "After the local prefix-cache hit the scheduler asks the KV connector how many more tokens "
        "it holds, from the block-aligned hit on. An async load holds its blocks without hashes until "
        "the worker reports it done; a sync one counts its tokens as computed at once."
    )
    if offloading:
        words += (
            " The offloading connector stores each computed prompt block to its CPU tier, which keeps "
            "its own LRU, and offers a later request what the GPU cache has lost."
        )
    return box("external", head, paragraph_html(words), body)


def _spec_decode(trace: Trace, k: int) -> Markup:
    spec = trace.scenario.speculative
    if spec is None or k == 0:
        return Markup("")
    body = spec_decode_html(trace.steps[k - 1], trace.snapshot_at(k - 1), trace.scenario.engine.block_size)
    if not body:
        return Markup("")
    drop = "drops the last block of every hit" if spec.use_eagle_block_drop() else "drops no hit block"
    head = Markup(
        '<div class="px-panel-head" data-px-panel="spec_decode">Speculative decoding · {}, {} drafts a step: {}, '
        '{} lookahead slots in every allocation</div><div class="px-refs">{}</div>'
    ).format(spec.method, spec.num_speculative_tokens, drop, spec.num_lookahead_tokens, refs_line(SPEC_REFS))
    return box("spec_decode", head, body)


def _groups_step(trace: Trace, k: int) -> Markup:
    groups = trace.scenario.groups
    if groups is None or k == 0:
        return Markup("")
    step = trace.steps[k - 1]
    if not step_has_groups(step):
        return Markup("")
    body = Markup('<div class="px-panel-head" data-px-panel="groups">KV cache groups</div>')
    body += Markup("").join(trusted(group_lookup_html(lookup, groups.groups)) for lookup in step.of(GroupLookup))
    skipped = step.of(SkippedFreed)
    if skipped:
        body += trusted(skipped_html(skipped, trace.snapshot_at(k)))
    retention = step.of(Retention)
    if retention:
        body += caption_html(
            "Caching in the window groups: ✓ gets a hash, – stays unhashed (a later hit cannot reach it)."
        )
        body += trusted(retention_html(retention))
    return box("groups", body)
