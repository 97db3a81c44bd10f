"""The whole walk of a scenario for the stage component, built once per replay: every step's
drawn content (the NOW box, the panels, the state after it; or presenter mode's one screen) and
every block's history, so the browser steps through it with no server run.

A step is a list of part ids into one table of distinct HTML parts: a part that several steps
share (a hash map that did not change, a panel strip) is sent once, and the browser rewrites only
the parts that differ from the step it shows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from markupsafe import Markup

from explorer.errors import BadInput
from explorer.scenario.ops import Arrive
from explorer.scenario.records import HashedBlock
from explorer.scenario.trace import Trace
from explorer.view.history import StepBlocks, block_history, changed_blocks, holders_of
from explorer.view.html import columns, trusted
from explorer.view.stage_panels import now_html, phase_panels
from explorer.view.stage_state import state_views
from explorer.viz.presenter_html import changed_html, free_html
from explorer.viz.presenter_html import metrics_html as presenter_metrics_html

# What one stage may hold, in characters of distinct HTML parts and histories. A session holds
# a few copies of it while it goes to the browser (the strings, the message); past this a pool of
# thousands of blocks over many steps took a server past 1 GB for two sessions.
MAX_STAGE_CHARS = 40_000_000


@dataclass
class _Parts:
    """Distinct HTML parts, each with its index; their total size is capped (MAX_STAGE_CHARS)."""

    table: list[str] = field(default_factory=list)
    index: dict[str, int] = field(default_factory=dict)
    chars: int = 0

    def add(self, part: Markup | str) -> int:
        body = str(part)
        i = self.index.get(body)
        if i is None:
            i = self.index[body] = len(self.table)
            self.table.append(body)
            self.count(len(body))
        return i

    def count(self, n: int) -> None:
        self.chars += n
        if self.chars > MAX_STAGE_CHARS:
            raise BadInput(
                f"this scenario draws more than {MAX_STAGE_CHARS:,} characters over its steps, more than "
                "the explorer keeps for one view: use fewer blocks or fewer steps"
            )


@dataclass(frozen=True)
class StageSteps:
    """What the stage component draws: ``steps[k]`` lists the parts of step k, top to bottom."""

    parts: list[str]
    steps: list[list[int]]
    histories: dict[str, str]  # block id -> its history table, every row naming its step
    num_blocks: int

    def to_data(self) -> dict[str, Any]:
        return {"parts": self.parts, "steps": self.steps, "histories": self.histories, "nblocks": self.num_blocks}


def build_steps(
    trace: Trace,
    base_ops: int,
    presenter: bool = False,
    off: str | None = None,
    window: int = 5,
    texts: Mapping[int, Mapping[int, str]] | None = None,
) -> StageSteps:
    """Every step of ``trace`` drawn (0 = before the first step). ``base_ops``: the scenario's own
    steps (later ones are the playground's); ``off_script``: the engine settings that differ from
    the scenario's own, in words (explorer.view.lesson_checks.off_script: its lesson checks are
    then off script); ``window``: the PromQL window in steps; ``texts``: ``snippets(trace)``."""
    parts = _Parts()
    steps: list[list[int]] = []
    changed_at: list[set[int]] = []
    holders: list[dict[int, dict[str, int]]] = []  # per step, for the block histories
    pairs_at: list[dict[int, tuple[int, bytes | None]]] = []  # per step, the changed blocks' (ref_cnt, hash)
    for k in range(len(trace.steps) + 1):  # in order: each state is read once, after the one before
        changed = changed_blocks(trace, k)
        changed_at.append(changed)
        snap = trace.snapshot_at(k)
        holders.append(holders_of(snap))
        pairs_at.append({b: snap.blocks[b] for b in changed})
        now = now_html(trace, k, base_ops, off)
        panels = phase_panels(trace, k, changed, dict((texts or {}).get(k, {})))
        if presenter:
            drawn = [
                Markup('<div class="px-pres-now">') + now + Markup("</div>"),
                _presenter(trace, k, changed, panels),
            ]
        else:
            drawn = [now, *panels, *state_views(trace, k, changed, window)]
        steps.append([parts.add(p) for p in drawn])
    touched = sorted(set().union(*changed_at))
    histories = {}
    blocks_at: dict[int, StepBlocks] = {}  # each step's block records, indexed once for every block
    for b in touched:
        histories[str(b)] = history_table(trace, b, holders, changed_at, blocks_at, pairs_at)
        parts.count(len(histories[str(b)]))
    return StageSteps(parts.table, steps, histories, len(trace.initial.blocks))


def _presenter(trace: Trace, k: int, changed: set[int], panels: list[Markup]) -> Markup:
    """One 16:9 screen: the panels, and beside them the metrics, the blocks the step changed and
    the free queue."""
    snap = trace.snapshot_at(k)
    prev = trace.snapshot_at(k - 1) if k > 0 else snap
    right = trusted(
        presenter_metrics_html(snap, prev) + changed_html(snap, changed, None, k) + free_html(snap, changed, None)
    )
    left = Markup('<div class="px-pres-panel">{}</div>').format(Markup("").join(panels))
    return columns((3, 2), left, Markup('<div class="px-pres-state">{}</div>').format(right))


def history_table(
    trace: Trace,
    block_id: int,
    holders: list[dict[int, dict[str, int]]] | None = None,
    changed_at: list[set[int]] | None = None,
    blocks_at: dict[int, StepBlocks] | None = None,
    pairs_at: list[dict[int, tuple[int, bytes | None]]] | None = None,
) -> str:
    """The block's history over the whole scenario; the browser greys the rows after the step it shows."""
    row = Markup('<tr data-px-step="%d"><td>%d</td><td>%s</td><td>%s</td></tr>')
    entries = block_history(trace, block_id, holders, changed_at, blocks_at, pairs_at)
    rows = [row % (e.step, e.step, e.label, e.text) for e in entries]
    if not rows:
        return '<div class="px-empty">Nothing has happened to this block in this scenario.</div>'
    head = Markup(
        '<table class="px-table" data-px-history="{}"><tr><th>step</th><th>op</th><th>what happened</th></tr>'
    )
    return str(head.format(block_id) + Markup("").join(rows) + Markup("</table>"))


def snippets(trace: Trace) -> dict[int, dict[int, str]]:
    """Step -> hash card index -> the text of its tokens, for the steps whose prompt was typed
    as text (nothing when the tokenizer is missing: the cards then show ids only)."""
    from explorer.tokens import token_strings

    out: dict[int, dict[int, str]] = {}
    for k, step in enumerate(trace.steps, start=1):
        op = step.op
        hashed = step.of(HashedBlock)
        if not isinstance(op, Arrive) or not op.text or not hashed:
            continue
        cards = list(hashed[:20]) + list(hashed[-4:])
        try:
            out[k] = {hb.index: "".join(token_strings(op.prompt[hb.start : hb.end])) for hb in cards}
        except BadInput:
            return {}
    return out
