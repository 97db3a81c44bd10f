"""The "Why it missed" part of the lookup panel (design section 14), drawn from the miss
records the replay kept (explorer.miss.reasons: what the core reported, classified outside it):
the prompt's blocks coloured by reason, the lookup's sentence, and a button to the step whose
allocation evicted the first missed block."""

from __future__ import annotations

from collections.abc import Sequence

from markupsafe import Markup

from explorer.miss.reasons import Miss
from explorer.miss.sentence import REASON_LABELS as LABELS
from explorer.miss.sentence import miss_sentence
from explorer.scenario.trace import Step
from explorer.view.html import box
from explorer.viz.palette import REASON_STYLES

MAX_CELLS = 96  # past this many blocks a prompt is drawn as runs of blocks, not one cell each


def step_misses(step: Step) -> list[tuple[str, Miss]]:
    """The lookups of a step with their miss records: an admit's own, an engine step's by id."""
    if step.miss is not None:
        return [(step.miss.request_id, step.miss)]
    return list((step.misses or {}).items())


def goto_step(miss: Miss) -> int | None:
    """The stage step (1-based) whose allocation evicted the first missed block, if it was evicted."""
    by = miss.evicted_by
    if miss.first_miss != "evicted" or by is None or by.step < 0:
        return None
    return by.step + 1


def _cells(miss: Miss, block_size: int) -> list[tuple[int, int, str]]:
    """(first block, last block, reason) runs of the prompt: its full blocks, then a partial one."""
    names = ["hit" if r is None else r for r in miss.block_reasons]
    if miss.num_tokens > len(names) * block_size:  # the tail after the last full block
        tail = "partial_block" if "partial_block" in miss.tokens else "skipped" if "skipped" in miss.tokens else "hit"
        names.append(tail)
    runs: list[tuple[int, int, str]] = []
    for i, r in enumerate(names):
        if runs and runs[-1][2] == r:
            runs[-1] = (runs[-1][0], i, r)
        else:
            runs.append((i, i, r))
    return runs


def _cell(i: int, j: int, reason: str, one_each: bool) -> Markup:
    bg, fg, letter = REASON_STYLES[reason]
    span = f"block {i}" if i == j else f"blocks {i}-{j}"
    tip = f"{span}: {LABELS[reason]}"
    if one_each:
        return Markup(
            '<span class="px-why-cell" data-px-reason="{}" data-px-index="{}" style="background:{};color:{}" '
            'title="{}">{}</span>'
        ).format(reason, i, bg, fg, tip, letter)
    return Markup(
        '<div class="px-why-seg" data-px-reason="{}" style="flex-grow:{};background:{};color:{}" title="{}">{}</div>'
    ).format(reason, j - i + 1, bg, fg, tip, letter)


def blocks_html(miss: Miss, block_size: int) -> Markup:
    """The prompt's blocks, each coloured (and lettered) by why it missed."""
    runs = _cells(miss, block_size)
    total = runs[-1][1] + 1 if runs else 0
    if total <= MAX_CELLS:
        cells = Markup("").join(_cell(k, k, r, True) for i, j, r in runs for k in range(i, j + 1))
        return Markup('<div class="px-why-cells">{}</div>').format(cells)
    return Markup('<div class="px-why-strip">{}</div>').format(
        Markup("").join(_cell(i, j, r, False) for i, j, r in runs)
    )


def legend_html(reasons: Sequence[str]) -> Markup:
    items = Markup("").join(
        Markup(
            '<span class="px-why-key"><span class="px-why-cell" style="background:{};color:{}">{}</span> {}</span>'
        ).format(REASON_STYLES[r][0], REASON_STYLES[r][1], REASON_STYLES[r][2], LABELS[r])
        for r in reasons
    )
    return Markup('<div class="px-why-legend">{}</div>').format(items)


def miss_html(request_id: str, miss: Miss, block_size: int) -> Markup:
    """One lookup's part: its blocks, the legend, its sentence, its missed tokens by reason."""
    shown = list(dict.fromkeys(r for _, _, r in _cells(miss, block_size)))
    counts = ", ".join(f"{n:,} {r}" for r, n in miss.tokens.items()) or "none"
    out = Markup(
        '<div class="px-why" data-px-why="{}"><div class="px-rowlabel"><b>{}</b>: {} of {} tokens hit</div>'
    ).format(request_id, request_id, f"{miss.hit_tokens + miss.external_tokens:,}", f"{miss.num_tokens:,}")
    out += blocks_html(miss, block_size) + legend_html(shown)
    out += Markup('<div class="px-why-sentence">{}</div>').format(miss_sentence(miss))
    out += Markup('<div class="px-cap">missed tokens by reason: {}</div>').format(counts)
    k = goto_step(miss)
    if k is not None and miss.first_miss_block is not None:
        out += Markup(
            '<button type="button" class="px-sbtn px-b-goto" data-px-goto="{}" title="Open step {}">'
            "Go to step {}: where block {} was evicted</button>"
        ).format(k, k, k, miss.first_miss_block)
    return out + Markup("</div>")


def why_missed_html(step: Step, block_size: int) -> Markup:
    """Every lookup of the step explained (empty when the step did no lookup)."""
    misses = step_misses(step)
    if not misses:
        return Markup("")
    head = Markup('<div class="px-panel-head px-why-head">Why it missed</div>')
    return Markup('<div class="px-why-part">{}{}</div>').format(
        head, Markup("").join(miss_html(rid, m, block_size) for rid, m in misses)
    )


def why_box(step: Step, block_size: int) -> Markup:
    """The part as a box of its own, for a step whose lookups the lookup panel does not draw."""
    body = why_missed_html(step, block_size)
    return box("why", body) if body else Markup("")
