"""The scenario model (design section 3): engine settings, ops, limits; validated by `parse`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from explorer.core.hashing import resolve_none_hash_seed
from explorer.core.release import DEFAULT_VLLM, VllmRelease, vllm_release
from explorer.core.sched.speculative import SpeculativeConfig
from explorer.scenario.ops import Op
from explorer.scenario.parse_connector import ARRIVE_KEYS, EXPECT_STATS, ConnectorSpec
from explorer.scenario.parse_groups import GROUP_EXPECT_KEYS, GroupsSpec
from explorer.scenario.step_spec import METRIC_EXPECT_TYPES, STEP_EXPECT_KEYS, SchedSpec

# Engine-step scenarios (design section 7) add `step` and `abort`; step_spec.py says which op
# and key belongs to which kind of scenario.
OPS = ("arrive", "admit", "sample", "decode", "generate", "finish", "preempt", "reset", "step", "abort")

# Keys each op accepts besides `op`, `note` and `expect`.
OP_KEYS: dict[str, frozenset[str]] = {
    "arrive": frozenset(
        {
            "id",
            "prompt",
            "text",
            "lora",
            "lora_path",
            "cache_salt",
            "mm",
            "prompt_logprobs",
            "output",
            *ARRIVE_KEYS,
            "accepted",
        }
    ),
    "admit": frozenset({"id", "tokens"}),
    "sample": frozenset({"id", "tokens"}),
    "decode": frozenset({"id", "draft_tokens"}),
    "generate": frozenset({"id", "tokens"}),
    "finish": frozenset({"id"}),
    "preempt": frozenset({"id"}),
    "reset": frozenset({"running", "external"}),
    "step": frozenset(),
    "abort": frozenset({"id"}),
}

_STATS_KEYS = (
    "stats_requests",
    "stats_queries",
    "stats_hits",
    "stats_preempted_requests",
    "stats_preempted_queries",
    "stats_preempted_hits",
)
_COMMON_EXPECT = frozenset({"ok", "num_free_blocks", "free_queue", "event_types", *_STATS_KEYS})
# `expect` keys per op: a key for a field the op does not report is bad input.
# The hybrid keys (design section 8) need kv_cache_groups: parse_groups.check_group_expects.
EXPECT_KEYS: dict[str, frozenset[str]] = {
    op: _COMMON_EXPECT | STEP_EXPECT_KEYS | set(EXPECT_STATS) | GROUP_EXPECT_KEYS
    if op == "step"
    else _COMMON_EXPECT
    | ({"hit_tokens", *GROUP_EXPECT_KEYS} if op == "admit" else set())
    | ({"new_block_ids"} if op in ("admit", "decode", "generate") else set())
    for op in OPS
}

# The largest max_model_len a scenario may set: 16,777,216 tokens (16 times the default, beyond
# any model vLLM 0.31.0 serves). max_model_len bounds a request's length, never the caps below.
MAX_MODEL_LEN = 1 << 24
MAX_BLOCK_SIZE = 1 << 16

# The type of each `expect` value: what the op reports for that key.
EXPECT_TYPES: dict[str, str] = {
    "ok": "true or false",
    "hit_tokens": "an integer",
    "new_block_ids": "an array of integers",
    "num_free_blocks": "an integer",
    "free_queue": "an array of integers",
    "event_types": "an array of strings",
    **{k: "an integer" for k in _STATS_KEYS},
    # engine steps (design section 7)
    "scheduled": "a table of integers",
    "preempted": "an array of strings",
    "finished": "an array of strings",
    **{k: "an integer" for k in EXPECT_STATS},  # with a KV connector (design section 10)
    # hybrid groups (design section 8): the kind depends on the op (parse_groups.py)
    **dict.fromkeys(GROUP_EXPECT_KEYS, "checked per op"),
    **METRIC_EXPECT_TYPES,
}


def value_has_kind(value: Any, kind: str) -> bool:
    """Whether an `expect` value is of the kind EXPECT_TYPES names for its key."""

    def integer(x: Any) -> bool:
        return isinstance(x, int) and not isinstance(x, bool)

    if kind == "checked per op":
        return True
    if kind == "true or false":
        return isinstance(value, bool)
    if kind == "an integer":
        return integer(value)
    if kind == "a table of integers":
        return isinstance(value, Mapping) and all(isinstance(k, str) and integer(v) for k, v in value.items())
    if kind == "a string":
        return isinstance(value, str)
    if not isinstance(value, list):
        return False
    if kind == "an array of strings":
        return all(isinstance(x, str) for x in value)
    return all(integer(x) for x in value)


@dataclass(frozen=True)
class Limits:
    """Caps for scenarios, each checked before the work it bounds (docs/design.md section 12,
    "Limits"). The CLI uses these defaults; the web app passes tighter ones."""

    max_prompt_tokens: int = 1 << 21  # tokens one op carries: a prompt, a sample's or generate's tokens
    max_total_tokens: int = 1 << 21  # tokens of every op together
    max_steps: int = 100_000
    max_blocks: int = 1 << 19  # engine.num_blocks
    max_full_blocks: int = 1 << 17  # full blocks the requests' tokens fill, in all (what is hashed)
    max_arrivals: int = 50_000  # `arrive` steps
    max_reset_blocks: int = 1 << 26  # resets x num_blocks: every reset walks the whole pool
    max_snapshot_cells: int = 1 << 24  # block entries a replay's snapshots hold (budget.py)
    max_recorded_decodes: int = 1 << 19  # `generate` tokens a recorded replay keeps the reports of
    max_extra_key_chars: int = 1 << 24  # extra-key characters over every request's blocks (budget.py)
    max_step_records: int = 1 << 18  # request-steps an engine-step replay keeps records of (budget.py)
    max_text_chars: int = 2_000_000  # `text` characters of all arrives, counted before tokenizing
    max_file_bytes: int = 16 << 20  # a scenario file


CLI_LIMITS = Limits()


@dataclass(frozen=True)
class EngineConfig:
    block_size: int = 16
    num_blocks: int = 300
    max_model_len: int = 1048576
    hash_algo: str = "sha256"
    hash_seed: str = ""  # "" = vLLM's default (PYTHONHASHSEED unset)
    enable_prefix_caching: bool = True
    events: bool = True
    int_block_hashes: bool = True

    def resolve_seed(self) -> str | None:
        """The seed string NONE_HASH will be hashed from (draws one for xxhash without a seed);
        None when prefix caching is off, because vLLM then builds no hasher at all."""
        if not self.enable_prefix_caching:
            return None
        return resolve_none_hash_seed(self.hash_algo, self.hash_seed or None)

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


# The one definition of the engine defaults: EngineConfig's own (design section 3).
ENGINE_DEFAULTS: dict[str, Any] = EngineConfig().as_dict()


@dataclass(frozen=True)
class Scenario:
    title: str
    engine: EngineConfig
    ops: tuple[Op, ...]
    source: str = "<scenario>"
    description: str = ""
    # The TOML tables as read, so a session can be written back out (`to_toml`).
    raw_steps: tuple[Mapping[str, Any], ...] = ()
    # The scheduler keys of an engine-step scenario; None for a manager-level one.
    sched: SchedSpec | None = None
    # The KV connector of an engine-step scenario (design section 10); None: none.
    connector: ConnectorSpec | None = None
    # engine.speculative (design section 9); None without drafts.
    speculative: SpeculativeConfig | None = None
    # The hybrid KV cache groups (design section 8); None: one full-attention group.
    groups: GroupsSpec | None = None
    # engine.vllm (design section 15): the release whose behaviour the replay follows.
    vllm: str = DEFAULT_VLLM

    @property
    def release(self) -> VllmRelease:
        return vllm_release(self.vllm)

    @property
    def hash_block_size(self) -> int:
        """The block size the request hasher hashes at (the group sizes' GCD with groups)."""
        return self.engine.block_size if self.groups is None else self.groups.resolved_hash_block_size

    def engine_dict(self) -> dict[str, Any]:
        """The [engine] table: the engine keys, the scheduler keys of an engine-step scenario,
        the hybrid keys as written, `kv_connector` and `speculative` when set."""
        d = {
            **self.engine.as_dict(),
            **(self.sched.as_dict() if self.sched is not None else {}),
            **(self.groups.as_dict() if self.groups is not None else {}),
        }
        if self.connector is not None:
            d["kv_connector"] = self.connector.as_dict()
        if self.vllm != DEFAULT_VLLM:
            d["vllm"] = self.vllm
        if self.speculative is not None:
            sp = self.speculative
            d["speculative"] = {"method": sp.method, "num_speculative_tokens": sp.num_speculative_tokens}
        return d

    def normalized(self, hash_seed: str | None) -> dict[str, Any]:
        engine = self.engine_dict()
        engine["hash_seed"] = hash_seed
        g = self.groups
        if g is not None:
            engine["kv_cache_groups"] = [
                {"kind": s.kind, "block_size": s.block_size, "sliding_window": s.sliding_window} for s in g.groups
            ]
            engine["prefix_cache_retention_interval"] = g.retention_interval
            engine["hash_block_size"] = g.resolved_hash_block_size
        ops = [op.normalized() for op in self.ops]
        if self.sched is not None:
            return {"kind": "engine_steps", "engine": engine, "ops": ops}
        return {"engine": engine, "ops": ops}


def replace_engine_seed(scenario: Scenario, seed: str) -> Scenario:
    """The scenario with an explicit hash seed (keeps a drawn xxhash seed across reruns)."""
    return replace(scenario, engine=replace(scenario.engine, hash_seed=seed))
