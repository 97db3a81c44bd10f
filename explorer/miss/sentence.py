"""One sentence per lookup saying why its blocks missed (design section 14)."""

from __future__ import annotations

from explorer.miss.reasons import Miss
from explorer.numbers import counted

# Each reason in a few words (a legend, a choice; "hit": the blocks the lookup found).
REASON_LABELS: dict[str, str] = {
    "hit": "hit (the cache or the connector)",
    "partial_block": "partial block (never hashed)",
    "last_token": "last full block (the lookup cap)",
    "skipped": "lookup skipped",
    "behind_miss": "cached, behind the first miss",
    "window": "cut by the window group",
    "eagle_drop": "dropped by EAGLE",
    "not_yet_cached": "not computed yet by another request",
    "evicted": "evicted",
    "reset": "forgotten by a reset",
    "failed_load": "failed connector load",
    "other_keys": "cached under other extra keys",
    "never_cached": "never seen before",
    "other_instance": "cached on another instance",
}

# What a run of blocks with this reason is, after "block(s) i-j ".
_WHAT = {
    "last_token": "{is_} the last full block: the lookup stops one token short",
    "skipped": "{was} not looked up (the lookup did not run)",
    "behind_miss": "{is_} cached but behind the first miss (the walk stops there)",
    "window": "{was} cut by the sliding-window group's fixed point",
    "eagle_drop": "{was} dropped by EAGLE (the drafter recomputes it)",
    "not_yet_cached": "{is_} still being computed by another running request",
    "reset": "{was} forgotten by a prefix-cache reset",
    "failed_load": "{was} dropped after a failed connector load",
    "other_keys": "{was} cached only under another LoRA, cache salt or multimodal input",
    "never_cached": "{was} never seen before: no cache size helps",
    "other_instance": "{was} cached on another instance",
}


def _span(i: int, j: int) -> str:
    return f"block {i}" if i == j else f"blocks {i}-{j}"


def _runs(reasons: tuple[str | None, ...]) -> list[tuple[int, int, str]]:
    out: list[tuple[int, int, str]] = []
    for i, r in enumerate(reasons):
        if r is None:
            continue
        if out and out[-1][2] == r and out[-1][1] == i - 1:
            out[-1] = (out[-1][0], i, r)
        else:
            out.append((i, i, r))
    return out


def miss_sentence(miss: Miss) -> str:
    """ "blocks 3-7 missed: block 3 was evicted at step 12 when C's allocation popped it; 4-7 ..."."""
    missed = sum(miss.tokens.values())
    if missed == 0:
        return "nothing missed"
    runs = _runs(miss.block_reasons)
    parts: list[str] = []
    for i, j, r in runs:
        plural = i != j
        if r == "evicted":
            by = miss.evicted_by if i == miss.first_miss_block else None
            when = f" at step {by.step + 1}" if by is not None else ""
            who = (
                f" when {by.request_id}'s allocation popped {'them' if plural else 'it'}"
                if by is not None and by.request_id
                else ""
            )
            text = ("were" if plural else "was") + f" evicted{when}{who}"
        else:
            text = _WHAT[r].format(is_="are" if plural else "is", was="were" if plural else "was")
        parts.append(f"{_span(i, j)} {text}")
    tail = miss.tokens.get("partial_block", 0)
    if tail:
        parts.append(f"{counted(tail, 'token')} after the last full block {'is' if tail == 1 else 'are'} never hashed")
    head = f"{counted(missed, 'token')} missed"
    if runs:
        first, last = runs[0][0], runs[-1][1]
        head = f"{_span(first, last)} missed"
    return head + ": " + "; ".join(parts)


# What the largest reason means for a cache-size decision (a sweep's one sentence).
_SHARE = {
    "never_cached": "were never seen before: no cache size helps them",
    "evicted": "were evicted before they were asked for again: a larger cache would keep them",
    "skipped": "belong to requests that did not fit the cache or were not looked up",
    "partial_block": "sit after a prompt's last full block: never hashed",
    "last_token": "are a prompt's last full block, which the lookup never covers",
    "behind_miss": "were cached but behind an earlier miss",
    "not_yet_cached": "were still being computed by a running request with the same prefix",
    "reset": "were forgotten by a prefix-cache reset",
    "failed_load": "were dropped after a failed connector load",
    "window": "were cut by the sliding-window groups",
    "eagle_drop": "were dropped by EAGLE",
    "other_keys": "were cached only under other extra keys (LoRA, cache salt, multimodal input)",
    "other_instance": "were cached on another instance: a better route would hit them",
}


def largest_reason_sentence(miss_tokens: dict[str, int]) -> str:
    """ "62% of missed tokens were never seen before: no cache size helps them"."""
    total = sum(miss_tokens.values())
    if total == 0:
        return "nothing missed"
    reason, n = max(miss_tokens.items(), key=lambda kv: kv[1])
    return f"{n / total:.0%} of missed tokens {_SHARE[reason]}"
