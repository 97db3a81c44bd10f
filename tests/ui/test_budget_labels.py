"""The session budget counts labels (image ids, LoRA names, cache salts): a 200,000-character
image id, from a link or an upload, is refused with one message before anything replays."""

from __future__ import annotations

import pytest

from explorer.errors import BadInput
from explorer.scenario.parse import parse_scenario_text
from explorer.ui.budget import MAX_LABEL_CHARS, PER_LABEL_CHAR, estimate_replay_bytes
from explorer.ui.state import UI_LIMITS
from explorer.ui.state import encode_blob as blob
from tests.ui.helpers import ROOT, errors, explorer, no_exception, page_title

LESSON = (ROOT / "lessons" / "02_extra_keys.toml").read_text()
LONG = "c" * 200_000


def test_a_link_with_a_200000_character_image_id_is_one_message():
    toml = LESSON.replace('"cat-photo"', f'"{LONG}"', 1)
    up = blob({"name": "big.toml", "toml": toml})
    assert len(up) < 6_000  # it fits in a link
    at = explorer(query={"up": up})
    no_exception(at)
    errs = errors(at)
    assert len(errs) == 1 and "big.toml" in errs[0] and "image id #1: 200,000 characters" in errs[0], errs
    assert page_title(at) == "Two chat turns"  # the session fell back to the default lesson


def test_an_upload_with_a_200000_character_image_id_is_refused():
    # Refused as the upload is parsed, by the extra-key cap the CLI applies too (before any
    # budget estimate is made).
    with pytest.raises(BadInput, match=r"up\.toml: step \d+ \(arrive \w+\): image id #1: 200,000 characters is more"):
        parse_scenario_text(LESSON.replace('"cat-photo"', f'"{LONG}"', 1), "up.toml", UI_LIMITS)


@pytest.mark.parametrize("key", ["mm", "cache_salt"])
def test_labels_count_in_the_estimate_per_block_they_label(key):
    """Labels within the cap still count: each character per block it labels, per live step."""
    short, long = "x", "y" * MAX_LABEL_CHARS
    label = {
        "mm": lambda v: f'mm = [{{ id = "{v}", offset = 0, length = 64 }}]',
        "cache_salt": lambda v: f'cache_salt = "{v}"',
    }
    lines = ["[engine]", "block_size = 16", "num_blocks = 200"]

    def text(v: str) -> str:
        out = list(lines)
        for i in range(30):
            out += [
                "[[steps]]",
                'op = "arrive"',
                f'id = "R{i}"',
                f'prompt = "{i * 1_000}:{i * 1_000 + 128}"',
                label[key](v),
            ]
        return "\n".join(out) + "\n"

    a = estimate_replay_bytes(parse_scenario_text(text(short), "a.toml", UI_LIMITS))
    b = estimate_replay_bytes(parse_scenario_text(text(long), "b.toml", UI_LIMITS))
    # 30 requests of 8 blocks (+1), each live from its arrival to the end: 30 * 31 / 2 request-steps
    assert b - a >= (MAX_LABEL_CHARS - 1) * 9 * (30 * 31 // 2) * PER_LABEL_CHAR
