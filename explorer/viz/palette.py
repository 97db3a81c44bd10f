"""Block states, their letters and their colours (Okabe-Ito, safe for colour-blind readers).

A block's state reads without colour too: every cell carries a letter.
    N     the null block (block 0, never handed out)
    F     free, in the free queue; "F" with a short hash when it is still cached
    U<n>  in use by n requests (ref_cnt = n)
"""

from __future__ import annotations

# Okabe & Ito (2008), "Color Universal Design".
OKABE_ITO = {
    "black": "#000000",
    "orange": "#E69F00",
    "sky_blue": "#56B4E9",
    "bluish_green": "#009E73",
    "yellow": "#F0E442",
    "blue": "#0072B2",
    "vermillion": "#D55E00",
    "reddish_purple": "#CC79A7",
}

# state key -> (background, text colour, legend label)
STATES: dict[str, tuple[str, str, str]] = {
    "null": (OKABE_ITO["black"], "#FFFFFF", "N  null block (block 0)"),
    "free": ("#FFFFFF", "#444444", "F  free, no hash"),
    "cached": (OKABE_ITO["sky_blue"], "#000000", "F  free, still cached (has a hash)"),
    "used": (OKABE_ITO["orange"], "#000000", "U1  in use by one request"),
    "shared": (OKABE_ITO["bluish_green"], "#000000", "U2+  shared by several requests"),
}
STATE_ORDER = ("null", "free", "cached", "used", "shared")
STATE_CODE = {s: i for i, s in enumerate(STATE_ORDER)}

CHANGED = OKABE_ITO["vermillion"]  # outline of blocks this step changed
SELECTED = OKABE_ITO["blue"]  # outline of the block whose history is open
HIT = OKABE_ITO["bluish_green"]
MISS = OKABE_ITO["vermillion"]


def block_state(block_id: int, ref_cnt: int, block_hash: bytes | None) -> str:
    if block_id == 0:
        return "null"
    if ref_cnt <= 0:
        return "free" if block_hash is None else "cached"
    return "used" if ref_cnt == 1 else "shared"


def block_letter(block_id: int, ref_cnt: int) -> str:
    """N, F or U<n>: the state without colour."""
    if block_id == 0:
        return "N"
    return "F" if ref_cnt <= 0 else f"U{ref_cnt}"


def short_hash(h: bytes | None, n: int = 4) -> str:
    """The first ``n`` hex digits of a digest (what the pool grid prints), or "" for none."""
    return "" if h is None else h.hex()[:n]


# Why a block missed (design section 14): reason -> (background, text colour, letter). The
# letter reads without colour; "hit" is the blocks the lookup found.
REASON_STYLES: dict[str, tuple[str, str, str]] = {
    "hit": (OKABE_ITO["bluish_green"], "#000000", "H"),
    "partial_block": ("#DDDDDD", "#000000", "P"),
    "last_token": ("#BBBBBB", "#000000", "L"),
    "skipped": ("#888888", "#FFFFFF", "S"),
    "behind_miss": (OKABE_ITO["yellow"], "#000000", "B"),
    "window": (OKABE_ITO["reddish_purple"], "#000000", "W"),
    "eagle_drop": ("#F5C6E4", "#000000", "D"),
    "not_yet_cached": (OKABE_ITO["sky_blue"], "#000000", "Y"),
    "evicted": (OKABE_ITO["vermillion"], "#FFFFFF", "E"),
    "reset": (OKABE_ITO["orange"], "#000000", "R"),
    "failed_load": ("#8B3A00", "#FFFFFF", "F"),
    "other_keys": (OKABE_ITO["blue"], "#FFFFFF", "K"),
    "never_cached": (OKABE_ITO["black"], "#FFFFFF", "N"),
    "other_instance": ("#6A3D9A", "#FFFFFF", "I"),
}
