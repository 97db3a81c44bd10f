"""What speculative decoding did in one step, as HTML (design section 9; spec part 2, rules 72-74).

Three drawings, each from what the core reported for the step (never worked out again here):
- the block EAGLE dropped from the lookup's hit (``EagleDropped`` records, from ``on_eagle_drop``);
- each allocation's slots as a bar: the tokens whose slots it fills, the draft positions past
  ``num_tokens`` (scheduled, never hashed) and the lookahead slots (allocated, never hashed),
  from the admission check (``AdmissionCheck.num_lookahead_tokens``) and the request after it;
- the drafts verified (``DraftsVerified`` records): accepted ones green, rolled-back ones struck out.
Pure functions of a trace step: no Streamlit.
"""

from __future__ import annotations

from explorer.numbers import counted
from explorer.scenario.records import AdmissionCheck, DraftsVerified, EagleDropped
from explorer.scenario.trace import Snapshot, Step
from explorer.viz.text import esc

MAX_ROWS = 40  # every size has a cap: requests drawn per step
_SEG = "display:inline-block;height:1.4em;line-height:1.4em;font-size:0.75em;overflow:hidden;text-align:center"
_CHIP = "display:inline-block;padding:0 0.4em;margin:0 0.1em;border:1px solid #888;border-radius:3px;cursor:pointer"
_KNOWN, _DRAFT, _LOOKAHEAD = "#9cc3e6", "#f3c27b", "repeating-linear-gradient(45deg,#ddd,#ddd 4px,#fff 4px,#fff 8px)"


def dropped_html(step: Step, block_size: int) -> str:
    """The lookup's last hit block, dropped by EAGLE: its index, its block and the hit it cost."""
    rows = []
    for drop in step.of(EagleDropped)[:MAX_ROWS]:
        index, block_id = drop.block_index, drop.block_id
        matched = (index + 1) * block_size
        rows.append(
            f'<div style="margin:0.35em 0" data-px-eagle-drop="{block_id}">'
            f"<b>{esc(drop.request_id, 24)}</b>: the lookup matched "
            f"{counted(index + 1, 'block')} ({matched:,} "
            f"tokens); EAGLE drops the last, the request's block {index}, pool block "
            f'<span data-px-block="{block_id}" style="{_CHIP};text-decoration:line-through">#{block_id}</span>: '
            f"the hit is {matched - block_size:,} tokens. The drafter needs that block's hidden states, which only "
            "computing it again gives.</div>"
        )
    return "".join(rows)


def _bar(check: AdmissionCheck, num_tokens: int) -> str:
    total = max(check.num_tokens_need_slot, 1)
    scheduled_end = check.num_computed_tokens + check.num_new_tokens
    known = min(scheduled_end, num_tokens)
    drafts = max(scheduled_end - known, 0)
    lookahead = max(check.num_tokens_need_slot - scheduled_end, 0)
    segs = []
    for n, colour, label, title in (
        (known, _KNOWN, f"{known:,} tokens", "tokens known: full blocks of these get a hash"),
        (drafts, _DRAFT, f"{drafts} drafts", "draft positions: scheduled, never hashed until accepted"),
        (lookahead, _LOOKAHEAD, f"{lookahead} lookahead", "lookahead slots for the drafter: allocated, never hashed"),
    ):
        if n:
            width = 100.0 * n / total
            segs.append(
                f'<span style="{_SEG};width:{width:.3f}%;background:{colour}" title="{title}">'
                f"{label if width >= 8 else ''}</span>"
            )
    return f'<div style="width:100%;border:1px solid #999;white-space:nowrap">{"".join(segs)}</div>'


def slots_html(step: Step, before: Snapshot) -> str:
    """Each successful allocation with lookahead slots or drafts, as a bar of its slots (the
    request's known tokens are those before the step: sampled tokens arrive after it)."""
    rows = []
    for check in step.of(AdmissionCheck):
        if not check.ok or check.full_sequence:
            continue
        req = before.request(check.request_id)
        num_tokens = req.num_tokens if req is not None else check.num_computed_tokens + check.num_new_tokens
        scheduled_end = check.num_computed_tokens + check.num_new_tokens
        if not check.num_lookahead_tokens and scheduled_end <= num_tokens:
            continue
        rows.append(
            f'<div style="margin:0.35em 0" data-px-lookahead="{esc(check.request_id)}:{check.num_lookahead_tokens}">'
            f"<b>{esc(check.request_id, 24)}</b>: slots for {check.num_tokens_need_slot:,} positions = "
            f"{scheduled_end:,} scheduled + {check.num_lookahead_tokens} lookahead; "
            + (
                f"only the {num_tokens:,} known tokens can be hashed (the cache stops at num_tokens)."
                if scheduled_end > num_tokens
                else f"only these {scheduled_end:,} of the {num_tokens:,} known tokens can be hashed "
                "(the cache stops at the scheduled tokens)."
            )
            + f"{_bar(check, num_tokens)}</div>"
        )
        if len(rows) >= MAX_ROWS:
            break
    return "".join(rows)


def _draft_boxes(d: DraftsVerified) -> str:
    boxes = []
    for i in range(d.num_drafts):
        ok = i < d.num_accepted and not d.placeholders
        style = "background:#8fd18f" if ok else "background:#f2a7a7;text-decoration:line-through"
        boxes.append(
            f'<span style="{_CHIP};{style}" title="{"accepted" if ok else "rejected"}">{"-1" if d.placeholders else i + 1}</span>'
        )
    return "".join(boxes)


def drafts_html(step: Step) -> str:
    """The drafts this step verified, per request: accepted, rolled back, where it stands now."""
    rows = []
    for d in step.of(DraftsVerified)[:MAX_ROWS]:
        what = (
            f"{d.num_drafts} placeholder drafts (an admission padded to 1 + k tokens): none can be accepted"
            if d.placeholders
            else f"{d.num_drafts} drafts verified: {d.num_accepted} accepted, {d.num_rejected} rolled back"
        )
        rows.append(
            f'<div style="margin:0.35em 0" data-px-drafts="{esc(d.request_id)}:{d.num_accepted}/{d.num_drafts}">'
            f"<b>{esc(d.request_id, 24)}</b>: {what}; num_computed_tokens is {d.num_computed_tokens:,}. "
            f"{_draft_boxes(d)}</div>"
        )
    return "".join(rows)


def spec_decode_html(step: Step, before: Snapshot, block_size: int) -> str:
    """All three drawings for a step ("" when speculative decoding did nothing visible in it)."""
    return dropped_html(step, block_size) + slots_html(step, before) + drafts_html(step)
