"""A fleet's configuration: what a fleet file holds (every default here), its limits, and its
canonical TOML (the editor and the share links write it back with `dumps_fleet`).

Reading and checking a fleet file is `explorer.router.fleet_file`; share links are
`explorer.router.share`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

from explorer.scenario.write import toml_value

POLICIES = ("prefix", "round_robin", "least_loaded")
POLICY_LABELS = {"prefix": "prefix-aware", "round_robin": "round robin", "least_loaded": "least loaded"}
BASELINE = "prefix_healthy"  # the prefix policy with every failure switch off
TIE_BREAKS = ("least_loaded", "lowest_index", "round_robin", "random")
WORKLOAD_KINDS = ("chat", "trace")
MAX_TOML_BYTES = 64 << 10  # a fleet file (and a decompressed share link)


@dataclass(frozen=True)
class FleetSpec:
    instances: int = 4
    block_size: int = 16
    num_blocks: int = 1000  # per instance; block 0 is the null block
    hash_algo: str = "sha256"
    hash_seed: str = ""  # "" = vLLM's default (PYTHONHASHSEED unset): xxhash then draws per instance
    int_block_hashes: bool = True  # VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES
    scheduler: str = "async"  # each instance's: "async" (AsyncScheduler, vLLM's default) | "sync"
    max_num_batched_tokens: int = 2048  # each instance's token budget per engine step


@dataclass(frozen=True)
class RouterSpec:
    load_weight: float = 8.0  # blocks of prefill one request in flight is worth
    tie_break: str = "least_loaded"


@dataclass(frozen=True)
class SystemPrompt:
    text: str | None = None
    prompt: str | tuple[int, ...] | None = None  # a token spec or token ids

    def as_toml(self) -> dict[str, Any]:
        if self.text is not None:
            return {"text": self.text}
        return {"prompt": self.prompt if isinstance(self.prompt, str) else list(self.prompt or ())}


@dataclass(frozen=True)
class WorkloadSpec:
    kind: str = "chat"
    seed: int = 7
    requests: int = 200
    tenants: int = 2
    system_prompts: int = 6
    system_prompt_tokens: tuple[int, int] = (300, 1000)
    user_tokens: tuple[int, int] = (30, 300)
    output_tokens: tuple[int, int] = (30, 200)
    turns: tuple[int, int] = (3, 10)
    session_gap_ms: float = 150.0  # mean gap between new chat sessions
    think_ms: float = 1500.0  # mean gap between a reply and the next turn
    decode_ms: float = 20.0  # one engine step (a decode token) per decode_ms on every instance
    prompts: tuple[SystemPrompt, ...] = ()  # explicit system prompts (text or token spec)
    trace: str = "shipped"  # kind = "trace": the shipped Mooncake trace or an uploaded one
    trace_outputs: bool = False  # trace: generate output_length tokens of 0


@dataclass(frozen=True)
class FailureSpec:
    router_hash_algo: str = ""  # "" = the fleet's
    router_hash_seed: str | None = None  # None = the fleet's; a string plays PYTHONHASHSEED
    router_block_size: int = 0  # 0 = the fleet's
    router_wrong_hash_form: bool = False  # compares raw digests against 64-bit ints (or back)
    xxhash_unshared_seed: bool = False  # instances on xxhash, each drawing its own seed
    tenant_salt: bool = False  # every tenant sends cache_salt = its name
    router_ignores_salt: bool = False  # ... and the router hashes without it
    drop_batches: float = 0.0  # fraction of event batches lost, no replay
    drop_seed: int = 1

    @property
    def active(self) -> bool:
        return self != FailureSpec(drop_seed=self.drop_seed)


@dataclass(frozen=True)
class PrefillSpec:
    params: float = 8.03e9  # the walkthrough's Llama 3.1 8B
    peak_tflops: float = 989.0  # H100 dense BF16
    utilization: float = 0.5
    attention: bool = False  # add Llama-3-8B-shaped causal attention FLOPs


@dataclass(frozen=True)
class FleetConfig:
    title: str = "Fleet"
    description: str = ""
    fleet: FleetSpec = field(default_factory=FleetSpec)
    router: RouterSpec = field(default_factory=RouterSpec)
    workload: WorkloadSpec = field(default_factory=WorkloadSpec)
    failures: FailureSpec = field(default_factory=FailureSpec)
    prefill: PrefillSpec = field(default_factory=PrefillSpec)
    source: str = "<fleet>"

    def healthy(self) -> FleetConfig:
        return replace(self, failures=FailureSpec(drop_seed=self.failures.drop_seed))

    def to_toml(self) -> str:
        return dumps_fleet(self)

    def key(self) -> str:
        """A canonical string naming everything that changes the outcome."""
        return self.to_toml()


@dataclass(frozen=True)
class Limits:
    max_instances: int = 16
    max_requests: int = 2000
    max_num_blocks: int = 200_000
    max_total_blocks: int = 800_000  # instances x num_blocks
    max_block_size: int = 1024
    max_prompt_tokens: int = 32_768  # a system prompt
    max_piece_tokens: int = 8192  # a user message or a reply
    max_turns: int = 64
    max_tenants: int = 64
    max_system_prompts: int = 64


LIMITS = Limits()


# ---- writing a config back (share links, the editor) ----------------------------------------------


def dumps_fleet(cfg: FleetConfig) -> str:
    """Canonical TOML for a config: every key written, defaults included, one order."""
    lines = [f"title = {toml_value(cfg.title)}"]
    if cfg.description:
        lines.append(f"description = {toml_value(cfg.description)}")

    def table(name: str, obj: Any, skip: Sequence[str] = ()) -> None:
        lines.extend(["", f"[{name}]"])
        for f in fields(obj):
            if f.name in skip:
                continue
            v = getattr(obj, f.name)
            if v is None:
                continue
            lines.append(f"{f.name} = {toml_value(v)}")

    table("fleet", cfg.fleet)
    table("router", cfg.router)
    w = cfg.workload
    skip = ["prompts"]
    if w.prompts:
        skip += ["system_prompt_tokens"]
    table("workload", w, skip)
    for p in w.prompts:
        lines.extend(["", "[[workload.system_prompt]]"])
        lines.extend(f"{k} = {toml_value(v)}" for k, v in p.as_toml().items())
    table("failures", cfg.failures)
    table("prefill", cfg.prefill)
    return "\n".join(lines) + "\n"
