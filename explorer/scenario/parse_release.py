"""The `vllm` engine key (design section 15) and what the chosen release refuses."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from explorer.core.release import DEFAULT_VLLM, RELEASES, vllm_release
from explorer.errors import BadInput
from explorer.scenario.parse_groups import GroupsSpec
from explorer.scenario.spec import Scenario

RELEASE_KEY = "vllm"


def parse_release(fail: Callable[[str, str], BadInput], raw: Any) -> str:
    """``engine.vllm``: one of the modelled releases (default 0.31.0)."""
    raw = raw if isinstance(raw, Mapping) else {}
    value = raw.get(RELEASE_KEY, DEFAULT_VLLM)
    if not isinstance(value, str) or value not in RELEASES:
        raise fail(f"engine.{RELEASE_KEY}", f"expected one of {', '.join(map(repr, RELEASES))}, got {value!r}")
    return value


def not_modelled(feature: str, version: str) -> str:
    """The one line for a feature the engine does not mirror under ``version`` yet."""
    return f'{feature} is not modelled for vLLM {version} yet: use vllm = "0.31.0"'


def check_release(fail: Callable[[str, str], BadInput], version: str, groups: GroupsSpec | None) -> None:
    """What only the chosen release refuses: since 0.32 a hash block size (vLLM's
    prefix_match_unit) other than the block size with one group (kv_cache_utils.py:843-857 in
    0.33.0); 0.31.0 ignores it."""
    release = vllm_release(version)
    if groups is None or len(groups.groups) != 1 or groups.hash_block_size is None:
        return
    bs = groups.groups[0].block_size
    if release.refuse_hash_block_size_one_group and groups.hash_block_size != bs:
        raise fail(
            "engine.hash_block_size",
            f"vLLM {version} refuses hash_block_size = {groups.hash_block_size} with one KV cache group: "
            f"prefix-cache hits land on the block size ({bs}); unset it or set it to {bs}",
        )


def with_release(scenario: Scenario, version: str | None) -> Scenario:
    """``scenario`` under ``version`` (``--vllm``), refused as that release refuses it; None
    keeps the scenario's own ``engine.vllm``."""
    if version is None or version == scenario.vllm:
        return scenario
    if version not in RELEASES:
        raise BadInput(f"--vllm: expected one of {', '.join(RELEASES)}, got {version!r}")

    def fail(where: str, msg: str) -> BadInput:
        return BadInput(f"{scenario.source}: {where}: {msg}")

    check_release(fail, version, scenario.groups)
    return replace(scenario, vllm=version)
