"""Panels 1 and 2 of a step: hashing (the request's block hashes) and the lookup (the walk to the
longest cached prefix)."""

from __future__ import annotations

from explorer.scenario.ops import Arrival, Arrive
from explorer.scenario.records import EagleDropped, HashedBlock, Lookup
from explorer.scenario.trace import Step, Trace
from explorer.view.explain.records import PANEL_TITLES, Panel
from explorer.view.explain.refs import REFS
from explorer.view.explain.words import blocks_text, counted, ids_text, request_at, tail_words


def _extra_sentence(step: Step) -> str | None:
    op = step.op
    if not isinstance(op, Arrival):
        return None
    parts = []
    if op.lora is not None:
        parts.append(
            f"the LoRA {op.lora.name!r} is an extra key of every block, so none of these hashes equals the base model's"
        )
    if op.cache_salt:
        parts.append(
            f"cache_salt {op.cache_salt!r} is an extra key of block 0 only, and since every later hash chains through block 0 the whole chain differs from an unsalted one"
        )
    for m in op.mm if isinstance(op, Arrive) else ():
        touched = [h.index for h in step.of(HashedBlock) if h.start < m.offset + m.length and m.offset < h.end]
        where = f"block{'s' if len(touched) != 1 else ''} {ids_text(touched)}" if touched else "no full block"
        parts.append(f"image {m.id!r} (tokens {m.offset}-{m.offset + m.length - 1}) is an extra key of {where}")
    if not parts:
        return None
    s = "; ".join(parts)
    return s[0].upper() + s[1:] + "."


def hashing_panel(trace: Trace, k: int) -> Panel | None:
    step = trace.steps[k - 1]
    op = step.op
    eng = trace.scenario.engine
    bs = trace.scenario.hash_block_size  # the hasher's unit (hybrid groups: their sizes' GCD)
    refs_arrive = (REFS["request_init"], REFS["block_hasher"], REFS["hash_block_tokens"])
    if isinstance(op, Arrival):
        n = len(op.prompt)
        full = n // bs
        if not eng.enable_prefix_caching and not step.of(HashedBlock):
            return Panel(
                "hashing",
                1,
                PANEL_TITLES["hashing"],
                (REFS["request_init"],),
                (
                    f"{op.id} arrives with {counted(n, 'token')}, {blocks_text(n // eng.block_size)} of {eng.block_size} when full.",
                    "Prefix caching is off, so vLLM builds no block hasher: the request carries no block hashes, nothing is looked up and nothing is cached.",
                ),
                "no hasher",
            )
        s = [f"{op.id} has {counted(n, 'token')}: {blocks_text(full)} of {bs} tokens and {tail_words(n, bs)}."]
        if full:
            s.append(
                f"Each full block is hashed as hash_fn((parent hash, its {bs} token ids, extra keys)) with {eng.hash_algo}; "
                f"block 0's parent is NONE_HASH, so block {full - 1}'s hash stands for all {full * bs:,} tokens up to its end."
            )
        else:
            s.append("No block is full, so nothing is hashed: this request can neither hit the cache nor be hit.")
        extra = _extra_sentence(step)
        if extra:
            s.append(extra)
        elif op.prompt_logprobs:
            s.append(
                "prompt_logprobs is set: the hashes exist, but the lookup will be skipped because every prompt token must be computed."
            )
        elif full:
            s.append("KV events publish each digest's last 8 bytes as a 64-bit integer (the event form below).")
        if not eng.enable_prefix_caching:
            s.append(
                "Prefix caching is off, but the KV connector needs the hashes, so vLLM builds the block hasher anyway: nothing is looked up or cached locally."
            )
        refs = refs_arrive + (REFS["none_hash"],) + ((REFS["extra_keys"],) if extra else ()) + (REFS["event_hash"],)
        return Panel("hashing", 1, PANEL_TITLES["hashing"], refs, tuple(s), f"{full} hashed")
    hashed = step.of(HashedBlock)
    if op.op in ("sample", "generate") and hashed:
        req = request_at(trace, k, op.id)
        n = req.num_tokens if req else 0
        idx = [h.index for h in hashed]
        toks = step.num_sampled or 0
        s = [
            f"{counted(toks, 'output token')} took {op.id} to {counted(n, 'token')}, and {blocks_text(len(idx))} became full: block{'s' if len(idx) > 1 else ''} {ids_text(idx)} got {'their hashes' if len(idx) > 1 else 'its hash'}.",
            f"The hasher runs again each time a token is appended and continues the chain from block {idx[0] - 1}'s hash; a hash exists before any KV is computed, and the block is cached only when allocate_slots covers it.",
        ]
        return Panel(
            "hashing",
            1,
            PANEL_TITLES["hashing"],
            (REFS["append_output"], REFS["block_hasher"], REFS["hash_block_tokens"]),
            tuple(s),
            f"{len(idx)} hashed",
        )
    return None


def lookup_panel(trace: Trace, k: int) -> Panel | None:
    step = trace.steps[k - 1]
    lk = step.last(Lookup)
    if lk is None:
        return None
    rid = step.op.id
    groups = trace.scenario.groups  # hybrid: the walk drawn is group 0's own (design section 8)
    bs = trace.scenario.engine.block_size if groups is None else groups.groups[0].block_size
    refs = (REFS["get_computed_blocks"], REFS["hit_cap"], REFS["find_longest_cache_hit"])
    if lk.skipped:
        return Panel(
            "lookup",
            2,
            PANEL_TITLES["lookup"],
            (REFS["get_computed_blocks"],),
            (
                f"No lookup for {rid}: {lk.skipped}.",
                f"get_computed_blocks returns no blocks and 0 hit tokens, so all {counted(lk.num_tokens, 'token')} will be computed.",
            ),
            "skipped",
        )
    hits = sum(1 for _, hit, _ in lk.probes if hit)
    missed = any(not hit for _, hit, _ in lk.probes)
    s = [
        f"get_computed_blocks walks {rid}'s block hashes from block 0 and may look at (num_tokens - 1) // block_size = "
        f"({lk.num_tokens:,} - 1) // {bs} = {blocks_text(lk.cap_blocks)}: the last token must be computed to give logits."
    ]
    if lk.cap_blocks == 0:
        s.append("That is no block at all, so the hit is 0 tokens.")
    elif hits == 0:
        s.append(
            "Block 0 missed, and every later hash chains through it, so the walk stops there: hit = 0 tokens."
            if missed
            else "No block it may look at hit: hit = 0 tokens."
        )
    elif missed:
        s.append(
            f"Blocks 0-{hits - 1} hit and block {hits} missed; every later hash chains through the missing one, so the walk stops at the first miss: "
            f"hit = {hits} x {bs} = {hits * bs:,} tokens."
        )
    else:
        s.append(
            f"{('Both blocks' if hits == 2 else 'All ' + blocks_text(hits)) if hits > 1 else 'The one block'} it may look at hit, so the walk ends at the cap: hit = {hits} x {bs} = {hits * bs:,} tokens"
            + (
                f"; the other {counted(lk.num_tokens - lk.hit_tokens, 'token')} are computed even if more of them are cached."
                if lk.num_tokens - lk.hit_tokens > 0
                else "."
            )
        )
    for drop in step.of(EagleDropped):  # speculative decoding (design section 9)
        s.append(
            f"EAGLE dropped the last matching block (block {drop.block_index}, #{drop.block_id}) from the hit: "
            f"{lk.hit_tokens:,} tokens."
        )
    if groups is not None:
        s.append(
            f"That is group 0's walk; the hit all {len(groups.groups)} KV cache groups agree on is {lk.hit_tokens:,} tokens (the KV cache groups panel)."
        )
    s.append("The lookup only reads the hash map: no ref_cnt changes until allocate_slots succeeds.")
    return Panel("lookup", 2, PANEL_TITLES["lookup"], refs, tuple(s), f"hit {lk.hit_tokens:,}")
