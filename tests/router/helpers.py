"""The small fleet the router tests share, and how they run it."""

from __future__ import annotations

from dataclasses import replace

from explorer.router.config import FailureSpec, FleetConfig, FleetSpec, WorkloadSpec
from explorer.router.results import PolicyRun
from explorer.router.simulate import simulate
from explorer.router.stream import RequestStream

SMALL = FleetConfig(
    title="small",
    fleet=FleetSpec(instances=3, num_blocks=600),
    workload=WorkloadSpec(
        seed=3,
        requests=60,
        tenants=2,
        system_prompts=3,
        system_prompt_tokens=(200, 400),
        user_tokens=(20, 120),
        output_tokens=(20, 80),
        turns=(2, 6),
        session_gap_ms=150.0,
    ),
)


def run(cfg: FleetConfig, stream: RequestStream | None = None) -> PolicyRun:
    return simulate(cfg, policies=("prefix",), baseline=False, stream=stream).runs["prefix"]


def with_failures(**kw) -> FleetConfig:
    return replace(SMALL, failures=FailureSpec(**kw))
