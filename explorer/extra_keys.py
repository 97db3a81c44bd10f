"""Caps on a request's extra keys (design section 12), shared by `explorer hash`, the hash
page and scenarios: every block's hash input, and its row of a hash table, repeats the LoRA
name and the ids of the images it overlaps, so their size multiplies with the blocks and is
counted before anything is hashed."""

from __future__ import annotations

from collections.abc import Sequence

from explorer.core.request import MultiModalFeature
from explorer.errors import BadInput

MAX_EXTRA_KEY_CHARS = 4096  # one LoRA name, cache salt or image id
MAX_LORA_PATH_CHARS = MAX_EXTRA_KEY_CHARS + len("loras/")  # a path, as long as the default for a longest name
MAX_MM_FEATURES = 1024  # images (multimodal items) one request carries
MAX_EXTRA_KEY_WORK = 1 << 24  # extra-key characters over all of one request's blocks


def extra_key_work(
    num_tokens: int,
    block_size: int,
    lora: tuple[str, str] | None,
    cache_salt: str | None,
    mm: Sequence[MultiModalFeature],
) -> int:
    """The extra-key characters the full blocks of ``num_tokens`` tokens carry (an upper bound):
    the LoRA ``(name, path)`` in every block, the salt in the first, each image id in every
    block it overlaps."""
    full = num_tokens // block_size
    work = (sum(map(len, lora)) if lora else 0) * full + (len(cache_salt or "") if full else 0)
    for f in mm:
        work += len(f.identifier) * min(full, -(-f.length // block_size) + 1)
    return work


def check_extra_keys(
    num_tokens: int,
    block_size: int,
    lora: tuple[str, str] | None,
    cache_salt: str | None,
    mm: Sequence[MultiModalFeature],
    work_cap: int = MAX_EXTRA_KEY_WORK,
) -> int:
    """BadInput, before anything is hashed, when an extra key is longer than
    MAX_EXTRA_KEY_CHARS, there are more than MAX_MM_FEATURES images, or the extra keys over
    all blocks pass ``work_cap`` characters. Returns that work. The `hash` command, the hash
    page and scenarios share these caps."""
    strings = [("LoRA name", lora[0] if lora else None, MAX_EXTRA_KEY_CHARS)]
    strings += [
        ("LoRA path", lora[1] if lora else None, MAX_LORA_PATH_CHARS),
        ("cache salt", cache_salt, MAX_EXTRA_KEY_CHARS),
    ]
    if len(mm) > MAX_MM_FEATURES:
        raise BadInput(f"{len(mm):,} images is more than the limit of {MAX_MM_FEATURES:,} per request")
    strings += [(f"image id #{i + 1}", f.identifier, MAX_EXTRA_KEY_CHARS) for i, f in enumerate(mm)]
    for what, value, cap in strings:
        if value is not None and len(value) > cap:
            raise BadInput(f"{what}: {len(value):,} characters is more than the limit {cap:,}")
    work = extra_key_work(num_tokens, block_size, lora, cache_salt, mm)
    if work > work_cap:
        raise BadInput(
            f"the extra keys (LoRA name, cache salt, image ids) repeat over the blocks to {work:,} characters, "
            f"more than the limit {work_cap:,}: use shorter names or fewer tokens"
        )
    return work
