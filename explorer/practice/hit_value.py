"""The "value of a hit" calculator's rows (the walkthrough's estimate beside the same with
attention) and the prefill measurements checked in under docs/."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from explorer.prefill.configs import ModelConfig


@dataclass(frozen=True)
class HitValueRow:
    label: str
    dense_only: str  # the walkthrough's estimate
    with_attention: str | None  # plus the attention term, when a model shape is given


def hit_value_rows(
    params: float,
    peak_flops: float,
    utilization: float,
    prompt_tokens: int,
    hit_tokens: int,
    attention: ModelConfig | None = None,
) -> list[HitValueRow]:
    """The walkthrough's table for these inputs, beside the same with the attention term.

    ``attention`` is a model shape (explorer.prefill.configs.ModelConfig) or None.
    """
    from explorer.prefill.estimate import estimate_prefill

    dense = estimate_prefill(params, prompt_tokens, hit_tokens, peak_flops, utilization)
    att = (
        estimate_prefill(params, prompt_tokens, hit_tokens, peak_flops, utilization, attention=attention)
        if attention
        else None
    )

    def both(f: Callable[[Any], str]) -> tuple[str, str | None]:
        return f(dense), (f(att) if att else None)

    rows = [
        ("prefill per prompt token (dense term)", lambda e: f"{e.per_token_s * 1e6:.1f} µs"),
        (f"{prompt_tokens:,}-token prompt, no cache", lambda e: f"{e.full_s * 1e3:.1f} ms"),
        (f"with a {hit_tokens:,}-token hit", lambda e: f"{e.cached_s * 1e3:.1f} ms"),
        ("saved", lambda e: f"{e.saved_s * 1e3:.1f} ms"),
        ("share of the prefill saved", lambda e: f"{e.saved_fraction:.0%}"),
    ]
    return [HitValueRow(label, *both(f)) for label, f in rows]


def max_hit_for(prompt_tokens: int, block_size: int = 16) -> int:
    """The largest hit a prompt can get: whole blocks, capped at num_tokens − 1."""
    return ((prompt_tokens - 1) // block_size) * block_size


_MEASUREMENT_KEYS = {"prompt_tokens", "hit_tokens", "full_ms", "cached_ms"}


def load_measurements(docs_dir: Path) -> list[dict[str, Any]]:
    """Prefill measurements checked in under docs/ (JSON files holding the `prefill --json` records:
    one object, a list of them, or an object with a list under any key). Malformed files are skipped."""
    found: list[dict[str, Any]] = []
    if not docs_dir.is_dir():
        return found
    for path in sorted(docs_dir.rglob("*.json")):
        try:
            if path.stat().st_size > 2_000_000:
                continue
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        stack = [data]
        while stack:
            item = stack.pop(0)
            if isinstance(item, dict):
                if set(item) >= _MEASUREMENT_KEYS:
                    found.append({**item, "source": path.name})
                else:
                    stack.extend(v for v in item.values() if isinstance(v, (list, dict)))
            elif isinstance(item, list):
                stack.extend(item)
    return found


def measured_summary(measurements: list[dict[str, Any]]) -> str | None:
    """One line over the checked-in runs of one setting (the README's benchmark row says the same):
    the median saved fraction, and that median as a share of the FLOP ideal. None when the runs
    are not all of one model, device, prompt and hit, or carry no saved/ideal fractions."""
    import statistics

    keys = {(m.get("model"), m.get("device"), m.get("prompt_tokens"), m.get("hit_tokens")) for m in measurements}
    if len(keys) != 1 or not all("saved_fraction" in m and "flop_ideal_fraction" in m for m in measurements):
        return None
    model, device, prompt, hit = keys.pop()
    saved = statistics.median(float(m["saved_fraction"]) for m in measurements)
    ideal = statistics.median(float(m["flop_ideal_fraction"]) for m in measurements)
    return (
        f"{model} on the {str(device).upper()}, {prompt:,}-token prompt, {hit:,} hit: saved {saved:.1%} (median of "
        f"{len(measurements)}) of the full prefill = {saved / ideal:.0%} of the FLOP ideal ({ideal:.1%})"
    )
