"""What a scenario costs, counted before the work is done; a cap passed is one `BadInput`.

`SizeBudget` counts while a scenario is parsed, before each op's tokens are expanded: tokens
per op and in all, the full blocks the requests' tokens fill (what the hasher hashes and the
events carry), `arrive` steps, and the pool walks of `reset`. `snapshot_cells` counts, before
a replay starts, the block entries its snapshots will hold: a recorded replay keeps one per
step (the pool's blocks plus every live request's blocks), a lean one only those of steps with
an `expect` and the final state. The caps are `Limits` fields (spec.py); docs/design.md lists
them.

Both follow the requests as the ops describe them (an `arrive` sets a request's length, `sample`
and `generate` add to it, `finish` ends it). A replay stops at the first op the engine refuses,
so for every prefix that runs these counts are upper bounds.
"""

from __future__ import annotations

from explorer.errors import BadInput
from explorer.scenario.ops import Abort, Arrival, EngineArrive, Finish, Generate, Op, Sample, StepOp
from explorer.scenario.spec import EngineConfig, Limits, Scenario


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


class SizeBudget:
    """The running counts of one scenario being parsed; each `take_*` raises a BadInput whose
    message names the cap, for the parser to prefix with the file and step."""

    def __init__(self, engine: EngineConfig, limits: Limits) -> None:
        self.engine = engine
        self.limits = limits
        self.tokens = 0
        self.full_blocks = 0
        self.arrivals = 0
        self.reset_blocks = 0
        self.extra_key_chars = 0
        self._live: dict[str, int] = {}  # request id -> tokens, as the ops describe it
        self._lora_chars: dict[str, int] = {}  # request id -> its LoRA name and path's length (every block's)

    def op_cap(self, op: str) -> tuple[int, str]:
        """The most tokens one op may carry, and the name of that cap for messages."""
        per_op = self.limits.max_prompt_tokens
        if self.engine.max_model_len <= per_op:
            return self.engine.max_model_len, "max_model_len"
        return per_op, "the prompt limit" if op == "arrive" else "the limit per op"

    def take_tokens(self, op: str, rid: str, n: int) -> None:
        """``n`` more tokens for request ``rid`` (an arrive's prompt, a sample's or generate's
        tokens), checked before they are expanded."""
        cap, cap_name = self.op_cap(op)
        if n > cap:
            raise BadInput(f"expands to {n:,} tokens, more than {cap_name} = {cap:,}")
        lim = self.limits
        if self.tokens + n > lim.max_total_tokens:
            raise BadInput(
                f"{n:,} more tokens would bring the scenario to {self.tokens + n:,} tokens in all, "
                f"more than the limit {lim.max_total_tokens:,}"
            )
        bs = self.engine.block_size
        before = 0 if op == "arrive" else self._live.get(rid, 0)
        blocks = (before + n) // bs - before // bs
        if self.full_blocks + blocks > lim.max_full_blocks:
            raise BadInput(
                f"would bring the scenario to {self.full_blocks + blocks:,} full {bs}-token blocks "
                f"in all, more than the limit {lim.max_full_blocks:,}: use a larger block_size or fewer tokens"
            )
        if op == "arrive":
            self._lora_chars.pop(rid, None)  # the arrive's own extra keys come next (take_extra_keys)
        self._add_extra_keys(self._lora_chars.get(rid, 0) * blocks)
        self.tokens += n
        self.full_blocks += blocks
        if op == "arrive" or rid in self._live:
            self._live[rid] = before + n

    def take_extra_keys(self, rid: str, lora_chars: int, work: int) -> None:
        """An arrive's extra keys: ``work`` characters over its prompt's blocks
        (explorer/extra_keys.py), and its LoRA name's and path's ``lora_chars`` in every block
        it grows by."""
        self._add_extra_keys(work)
        self._lora_chars[rid] = lora_chars

    def _add_extra_keys(self, chars: int) -> None:
        # every block's hash input, its `hashed` entry and its events repeat them
        cap = self.limits.max_extra_key_chars
        if self.extra_key_chars + chars > cap:
            raise BadInput(
                f"the extra keys (LoRA names, cache salts, image ids) repeat over the blocks to "
                f"{self.extra_key_chars + chars:,} characters in all, more than the limit {cap:,}"
            )
        self.extra_key_chars += chars

    def take_op(self, op: str, rid: str | None) -> None:
        """Count an op (arrivals, resets), checked before it is validated further."""
        lim = self.limits
        if op == "arrive":
            if self.arrivals + 1 > lim.max_arrivals:
                raise BadInput(f"more than the limit of {lim.max_arrivals:,} arrive steps")
            self.arrivals += 1
        elif op == "reset":
            self.reset_blocks += self.engine.num_blocks
            if self.reset_blocks > lim.max_reset_blocks:
                raise BadInput(
                    f"every reset walks the {self.engine.num_blocks:,}-block pool, and these resets "
                    f"walk {self.reset_blocks:,} blocks in all, more than the limit {lim.max_reset_blocks:,}"
                )
        elif op == "finish" and rid is not None:
            self._live.pop(rid, None)


def snapshot_cells(scenario: Scenario, record: bool, upto: int | None = None) -> int:
    """The block entries the snapshots of a replay of ``scenario`` (its first ``upto`` steps)
    hold: per snapshot the pool's blocks plus each live request's blocks. Recorded: the initial
    state and every step; lean: the initial state, the steps with an `expect`, the final state."""
    eng = scenario.engine
    bs, pool = eng.block_size, eng.num_blocks
    # Every group holds a table (window groups too: null blocks stand below the window), each
    # counted at the smallest block; with groups, a view keeps group 0's table twice (its
    # `block_ids` and `block_ids_by_group`).
    tables = 1 if scenario.groups is None else len(scenario.groups.groups) + 1
    if scenario.groups is not None:
        bs = min(g.block_size for g in scenario.groups.groups)
    ops: tuple[Op, ...] = scenario.ops if upto is None else scenario.ops[:upto]
    live: dict[str, int] = {}
    live_blocks = 0  # sum over live requests of ceil(tokens / block_size)
    # Per live request: one block more, and with drafts the k draft positions and at most k + 1
    # lookahead slots past its tokens (design section 9).
    sp = scenario.speculative
    extra = 1 + (0 if sp is None else _cdiv(2 * sp.num_speculative_tokens + 1, bs))
    cells = pool  # the initial snapshot
    # The offloading connector's CPU tier (design section 10): at most cpu_blocks chunks, and no
    # more than the full prompt blocks that have arrived.
    cpu_cap = scenario.connector.cpu_blocks if scenario.connector is not None else 0
    cpu_chunks = 0
    for op in ops:
        rid = op.id or ""
        if isinstance(op, Arrival) and cpu_cap:
            cpu_chunks = min(cpu_cap, cpu_chunks + len(op.prompt) // bs)
        before = live.get(rid)
        if isinstance(op, Arrival):  # an engine-step arrival grows by its output, one step at a time
            after: int | None = len(op.prompt) + (len(op.output) if isinstance(op, EngineArrive) else 0)
        elif isinstance(op, (Sample, Generate)) and before is not None:
            after = before + len(op.tokens)
        elif isinstance(op, (Finish, Abort)):
            after = None
        else:
            after = before
        if after != before:
            live_blocks += (0 if after is None else _cdiv(after, bs)) - (0 if before is None else _cdiv(before, bs))
            if after is None:
                live.pop(rid, None)
            else:
                live[rid] = after
        if record or op.expect:
            cells += pool + live_blocks * tables + extra * len(live) + cpu_chunks
    if not record:
        cells += pool + live_blocks * tables + extra * len(live) + cpu_chunks  # the final state
    return cells


def step_records(scenario: Scenario, upto: int | None = None) -> int:
    """The per-request records the `step` ops of an engine-step replay keep, lean or recorded:
    each step's batch, outputs and update hold an entry per scheduled request, at most
    max_num_seqs and at most the requests that have arrived (and not been aborted)."""
    if scenario.sched is None:
        return 0
    seqs = min(scenario.sched.max_num_seqs, scenario.sched.max_num_batched_tokens)
    ops: tuple[Op, ...] = scenario.ops if upto is None else scenario.ops[:upto]
    live: set[str] = set()
    records = 0
    for op in ops:
        if isinstance(op, Arrival):
            live.add(op.id)
        elif isinstance(op, Abort):
            live.discard(op.id)
        elif isinstance(op, StepOp):
            records += min(seqs, len(live))
    return records


def check_replay_budget(
    scenario: Scenario, limits: Limits, record: bool, upto: int | None = None, *, cli: bool = True
) -> None:
    """BadInput, before anything runs, when the replay's snapshots would pass their cap, or
    (recorded) the reports of its `generate` tokens theirs: each generated token is one
    allocation, whose admission check and cache call a recorded step keeps. ``cli``: the message
    may offer `run --json` (a lean replay); the web app has no such way out."""
    records = step_records(scenario, upto)
    if records > limits.max_step_records:
        raise BadInput(
            f"{scenario.source}: its `step` ops would keep {records:,} request records (each step one per "
            f"scheduled request: at most max_num_seqs = {scenario.sched.max_num_seqs if scenario.sched else 0:,}, "
            f"at most the requests arrived), more than the limit {limits.max_step_records:,}: "
            "use fewer steps or requests, or a smaller max_num_seqs"
        )
    if record:
        ops = scenario.ops if upto is None else scenario.ops[:upto]
        decodes = sum(len(op.tokens) for op in ops if isinstance(op, Generate))
        if decodes > limits.max_recorded_decodes:
            raise BadInput(
                f"{scenario.source}: recording {decodes:,} generated tokens keeps a report of each, more than "
                f"the limit {limits.max_recorded_decodes:,}" + (" (`run --json` keeps no reports)" if cli else "")
            )
    cells = snapshot_cells(scenario, record, upto)
    cap = limits.max_snapshot_cells
    if cells <= cap:
        return
    steps = len(scenario.ops) if upto is None else min(upto, len(scenario.ops))
    what = "a snapshot of every step" if record else "snapshots of the steps with an `expect`"
    hint = ""
    if record:  # the CLI can offer its lean replay; the page can only ask for a smaller scenario
        hint = " (`run --json` keeps only the final state)" if cli else ": use fewer blocks or fewer steps"
    raise BadInput(
        f"{scenario.source}: replaying {steps:,} steps on {scenario.engine.num_blocks:,} blocks with {what} "
        f"would hold {cells:,} block entries (the pool's, the live requests' and a CPU tier's), more than the limit "
        f"{cap:,}{hint}"
    )
