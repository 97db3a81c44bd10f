"""One scenario under vLLM 0.31.0 and 0.33.0, and the first step where they differ
(`run --vllm-diff`, design section 15).

Both replays are the engine's own (the release switches of `explorer.core.release`); this
module only compares the two replay JSONs it is handed, step by step, then the final state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from explorer.core.release import VLLM_0_31, VLLM_0_33
from explorer.errors import BadInput
from explorer.scenario.engine import replay
from explorer.scenario.parse_release import with_release
from explorer.scenario.spec import Scenario

PAIR = (VLLM_0_31.version, VLLM_0_33.version)


@dataclass(frozen=True)
class VllmDiff:
    """Where the two releases part: ``step`` is the 0-based index of the first differing step
    (None: the steps agree), ``fields`` what differs there (or in ``final``), ``refused`` the
    message of a release that refuses the scenario, ``jsons`` both replay JSONs by version."""

    step: int | None
    fields: tuple[str, ...]
    refused: dict[str, str]
    jsons: dict[str, dict[str, Any] | None]

    @property
    def identical(self) -> bool:
        return not self.fields and not self.refused

    def text(self, scenario: Scenario) -> str:
        a, b = PAIR
        if self.refused:
            return "; ".join(f"refused by vLLM {v}: {msg}" for v, msg in self.refused.items())
        if self.identical:
            return f"identical under {a} and {b}"
        if self.step is None:
            return f"steps identical under {a} and {b}; the final state differs in: {', '.join(self.fields)}"
        op = scenario.ops[self.step]
        who = f" {op.id}" if op.id is not None else ""
        return f"first difference at step {self.step + 1} ({op.op}{who}): {', '.join(self.fields)}"


def _differing(x: dict[str, Any], y: dict[str, Any]) -> tuple[str, ...]:
    return tuple(k for k in sorted(set(x) | set(y)) if k != "vllm" and x.get(k) != y.get(k))


def vllm_diff(scenario: Scenario) -> VllmDiff:
    """Replay ``scenario`` under both releases (the first replay's hash seed reused, so a drawn
    xxhash seed is the same) and name the first step whose replay JSON differs."""
    jsons: dict[str, dict[str, Any] | None] = {}
    refused: dict[str, str] = {}
    seed: str | None = None
    for version in PAIR:
        try:
            trace = replay(with_release(scenario, version), hash_seed=seed, record=False)
        except BadInput as e:
            refused[version] = str(e)
            jsons[version] = None
            continue
        seed = trace.hash_seed if seed is None else seed
        jsons[version] = trace.to_json()
    x, y = jsons[PAIR[0]], jsons[PAIR[1]]
    if x is None or y is None:
        return VllmDiff(None, (), refused, jsons)
    for i, (sx, sy) in enumerate(zip(x["steps"], y["steps"], strict=True)):
        fields = _differing(sx, sy)
        if fields:
            return VllmDiff(i, fields, refused, jsons)
    return VllmDiff(None, _differing(x["final"], y["final"]), refused, jsons)
