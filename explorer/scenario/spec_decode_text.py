"""`run`'s words for what speculative decoding did in a step (design section 9), from the
step's records: the hit block EAGLE dropped, the lookahead slots, the drafts verified."""

from __future__ import annotations

from explorer.scenario.records import AdmissionCheck, DraftsVerified, EagleDropped
from explorer.scenario.trace import Step


def spec_decode_words(step: Step) -> list[str]:
    words = [f"EAGLE dropped hit block #{e.block_index} (block {e.block_id})" for e in step.of(EagleDropped)]
    for a in step.of(AdmissionCheck):
        if a.ok and not a.full_sequence and a.num_lookahead_tokens:
            words.append(f"{a.num_tokens_need_slot} slots incl. {a.num_lookahead_tokens} lookahead (never hashed)")
    for d in step.of(DraftsVerified):
        verdict = (
            f"{d.num_drafts} placeholder drafts, none accepted"
            if d.placeholders
            else f"{d.num_accepted} of {d.num_drafts} drafts accepted, {d.num_rejected} rolled back"
        )
        words.append(f"{d.request_id}: {verdict} (num_computed_tokens {d.num_computed_tokens})")
    return words
