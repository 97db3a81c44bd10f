"""An `arrive` step of a scenario (design section 3): its prompt (a token spec, ints or text),
LoRA adapter, cache salt and images, each counted against the caps before it is expanded."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from explorer.core.request import MultiModalFeature
from explorer.errors import BadInput
from explorer.extra_keys import check_extra_keys
from explorer.scenario.budget import SizeBudget
from explorer.scenario.ops import Arrive, LoraSpec, MMSpec
from explorer.scenario.parse_values import Ctx, read_bool, read_int, read_str
from explorer.tokens import parse_token_list, spec_length


def parse_tokens(ctx: Ctx, where: str, value: Any, budget: SizeBudget, op: str, rid: str) -> tuple[int, ...]:
    """A token spec or int array, its length counted against the caps (per op, in all, full
    blocks) before anything is expanded."""
    try:
        if isinstance(value, str):
            n = spec_length(value)
        elif isinstance(value, (list, tuple)):
            n = len(value)
        else:
            raise BadInput(f"expected a token spec string or an array of ints, got {type(value).__name__}")
        budget.take_tokens(op, rid, n)
        return tuple(parse_token_list(value, "tokens", max_tokens=n))
    except BadInput as e:
        raise ctx.fail(where, str(e)) from None


class LoraRegistry:
    """LoRA ids 1, 2, ... in order of first appearance; one path per name."""

    def __init__(self) -> None:
        self.by_name: dict[str, LoraSpec] = {}

    def get(self, ctx: Ctx, where: str, name: str, path: str | None) -> LoraSpec:
        path = f"loras/{name}" if path is None else path
        if not path:
            raise ctx.fail(f"{where}.lora_path", "must not be empty (vLLM refuses an empty LoRA path)")
        known = self.by_name.get(name)
        if known is None:
            known = self.by_name[name] = LoraSpec(name, len(self.by_name) + 1, path)
        elif known.path != path:
            raise ctx.fail(f"{where}.lora_path", f"LoRA {name!r} already has path {known.path!r} in this scenario")
        return known


def parse_mm(ctx: Ctx, where: str, raw: Any, num_prompt: int) -> tuple[MMSpec, ...]:
    if not isinstance(raw, list):
        raise ctx.fail(f"{where}.mm", "expected an array of tables {id, offset, length}")
    items = []
    for i, item in enumerate(raw):
        w = f"{where}.mm[{i}]"
        if not isinstance(item, Mapping):
            raise ctx.fail(w, "expected a table {id, offset, length}")
        unknown = set(item) - {"id", "offset", "length"}
        if unknown or not {"id", "offset", "length"} <= set(item):
            raise ctx.fail(w, "expected exactly the keys id, offset and length")
        items.append(
            MMSpec(
                read_str(ctx, f"{w}.id", item["id"], allow_empty=False),
                read_int(ctx, f"{w}.offset", item["offset"], 0),
                read_int(ctx, f"{w}.length", item["length"], 1),
            )
        )
    items.sort(key=lambda m: m.offset)
    prev_end = 0
    for m in items:
        if m.offset + m.length > num_prompt:
            raise ctx.fail(
                f"{where}.mm",
                f"image {m.id!r} covers tokens [{m.offset}, {m.offset + m.length}), outside the {num_prompt}-token prompt",
            )
        if m.offset < prev_end:
            raise ctx.fail(f"{where}.mm", f"image {m.id!r} at offset {m.offset} overlaps the previous image")
        prev_end = m.offset + m.length
    return tuple(items)


def parse_arrive(
    ctx: Ctx,
    i: int,
    label: str,
    raw: Mapping[str, Any],
    rid: str,
    loras: LoraRegistry,
    budget: SizeBudget,
    note: str | None,
    expect: Mapping[str, Any],
) -> Arrive:
    has_prompt, has_text = "prompt" in raw, "text" in raw
    if has_prompt == has_text:
        raise ctx.fail(label, "prompt: give exactly one of `prompt` (token spec or ints) and `text`")
    text = None
    if has_prompt:
        prompt = parse_tokens(ctx, f"{label}: prompt", raw["prompt"], budget, "arrive", rid)
    else:
        text = read_str(ctx, f"{label}: text", raw["text"])
        try:
            from explorer.tokens import encode_text

            prompt = tuple(encode_text(text))
        except BadInput as e:
            raise ctx.fail(f"{label}: text", str(e)) from None
        try:
            budget.take_tokens("arrive", rid, len(prompt))
        except BadInput as e:
            raise ctx.fail(f"{label}: text", f"tokenizes to {len(prompt):,} tokens: {e}") from None
    if not prompt:
        raise ctx.fail(f"{label}: prompt", "empty prompt (vLLM refuses it too)")
    lora = None
    if "lora" in raw:
        name = read_str(ctx, f"{label}: lora", raw["lora"], allow_empty=False)
        path = read_str(ctx, f"{label}: lora_path", raw["lora_path"]) if "lora_path" in raw else None
        lora = loras.get(ctx, label + ": lora", name, path)
    elif "lora_path" in raw:
        raise ctx.fail(f"{label}: lora_path", "needs `lora` (the adapter name)")
    salt = read_str(ctx, f"{label}: cache_salt", raw["cache_salt"]) if "cache_salt" in raw else None
    mm = parse_mm(ctx, label, raw["mm"], len(prompt)) if "mm" in raw else ()
    try:  # the `hash` command's caps, counted before anything is hashed
        features = [MultiModalFeature(m.id, m.offset, m.length) for m in mm]
        pair = (lora.name, lora.path) if lora else None
        work = check_extra_keys(len(prompt), budget.engine.block_size, pair, salt, features)
        budget.take_extra_keys(rid, sum(map(len, pair)) if pair else 0, work)
    except BadInput as e:
        raise ctx.fail(label, str(e)) from None
    logprobs = read_bool(ctx, f"{label}: prompt_logprobs", raw.get("prompt_logprobs", False))
    return Arrive(
        index=i,
        id=rid,
        prompt=prompt,
        text=text,
        lora=lora,
        cache_salt=salt,
        mm=mm,
        prompt_logprobs=logprobs,
        note=note,
        expect=expect,
    )
