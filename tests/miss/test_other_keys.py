"""The reason ``other_keys`` (design section 14): a block never cached under its own keys whose
token ids were cached under another LoRA, cache salt or image, from what the core told."""

from __future__ import annotations

from typing import Any

import pytest

from explorer.miss.sentence import miss_sentence
from explorer.scenario.engine import replay
from explorer.scenario.parse import parse_scenario_dict


def _misses(*requests: dict[str, Any], finish: bool = True) -> list[dict[str, Any]]:
    """Each request arrives and is admitted in turn (finished before the next unless told);
    the MISS records of the admits, in order."""
    steps: list[dict[str, Any]] = []
    for i, r in enumerate(requests):
        rid = f"r{i}"
        steps += [{"op": "arrive", "id": rid, **r}, {"op": "admit", "id": rid}]
        if finish:
            steps.append({"op": "finish", "id": rid})
    trace = replay(parse_scenario_dict({"engine": {"block_size": 16, "num_blocks": 64}, "steps": steps}, "<t>"))
    return [s.to_json()["miss"] for s in trace.steps if s.op.op == "admit"]


PROMPT = "0:64, 900:910"  # 4 full blocks and a partial one


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ({}, {"lora": "sql"}),
        ({"lora": "sql"}, {}),
        ({"lora": "sql"}, {"lora": "chat"}),
        ({"cache_salt": "a"}, {"cache_salt": "b"}),
        ({}, {"cache_salt": "tenant"}),
    ],
)
def test_same_token_ids_under_other_keys(first, second):
    _, miss = _misses({"prompt": PROMPT, **first}, {"prompt": PROMPT, **second})
    assert miss["tokens"] == {"partial_block": 10, "other_keys": 64}
    assert miss["first_miss"] == "other_keys" and miss["first_miss_block"] == 0


def test_while_the_other_request_still_holds_its_blocks():
    _, miss = _misses({"prompt": PROMPT}, {"prompt": PROMPT, "lora": "sql"}, finish=False)
    assert miss["tokens"] == {"partial_block": 10, "other_keys": 64}


def test_an_image_changes_only_the_blocks_it_overlaps():
    # The image sits in block 2: blocks 0-1 hash as without it (a hit), 2-3 differ.
    image = {"mm": [{"id": "img", "offset": 40, "length": 4}]}
    _, miss = _misses({"prompt": PROMPT}, {"prompt": PROMPT, **image})
    assert miss["tokens"] == {"partial_block": 10, "other_keys": 32}
    assert miss["first_miss_block"] == 2


def test_same_keys_or_other_tokens_are_not_other_keys():
    same = _misses({"prompt": "0:64, 1:5", "lora": "sql"}, {"prompt": PROMPT, "lora": "sql"})[1]
    assert same["tokens"] == {"partial_block": 10}  # the same LoRA hits all 4 blocks
    other_tokens = _misses({"prompt": "100:164"}, {"prompt": PROMPT, "lora": "sql"})[1]
    assert other_tokens["tokens"] == {"partial_block": 10, "never_cached": 64}


def test_evicted_and_reset_come_before_other_keys():
    # A plain request caches the prompt; a reset forgets it; then the LoRA request's blocks
    # were once cached under no keys, which other_keys says (its own hashes never were).
    steps = [
        {"op": "arrive", "id": "a", "prompt": PROMPT},
        {"op": "admit", "id": "a"},
        {"op": "finish", "id": "a"},
        {"op": "arrive", "id": "b", "prompt": PROMPT, "lora": "sql"},
        {"op": "admit", "id": "b"},
        {"op": "finish", "id": "b"},
        {"op": "reset"},
        {"op": "arrive", "id": "c", "prompt": PROMPT, "lora": "sql"},
        {"op": "admit", "id": "c"},
    ]
    trace = replay(parse_scenario_dict({"engine": {"block_size": 16, "num_blocks": 64}, "steps": steps}, "<t>"))
    miss = trace.steps[-1].to_json()["miss"]
    assert miss["tokens"] == {"partial_block": 10, "reset": 64}
    assert "cached only under another LoRA" in miss_sentence(trace.steps[4].miss)
