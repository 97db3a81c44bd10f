"""Fleet files: the shipped examples, validation, round trips (explorer.router.fleet_file)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from explorer.errors import BadInput
from explorer.router.config import FleetConfig
from explorer.router.fleet_file import example_fleets, load_fleet, parse_fleet_text
from explorer.router.share import decode_share, encode_share
from explorer.router.stream import build_stream


def test_example_fleets_load_and_round_trip():
    fleets = example_fleets()
    assert 2 <= len(fleets) <= 4
    for path in fleets.values():
        cfg = load_fleet(path)
        again = parse_fleet_text(cfg.to_toml(), cfg.source)
        assert again == cfg
        assert decode_share(encode_share(cfg)) == replace(cfg, source="shared fleet link")


def test_default_config_equals_the_first_example():
    first = next(iter(example_fleets().values()))
    cfg = load_fleet(first)
    assert replace(cfg, title="", description="", source="") == replace(FleetConfig(), title="", source="")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[fleet]\ninstances = 0\n", r"\[fleet\] instances: expected an integer in 1..16, got 0"),
        ("[fleet]\ninstance = 4\n", r"\[fleet\] instance: unknown key"),
        ("[fleet]\nhash_algo = 'md5'\n", r"\[fleet\] hash_algo: expected one of"),
        ("[fleet]\nscheduler = 'fast'\n", r"\[fleet\] scheduler: expected one of"),
        ("[fleet]\nmax_num_batched_tokens = 32\n", r"\[fleet\] max_num_batched_tokens: expected an integer in 64"),
        ("[router]\ntie_break = 'coin'\n", r"\[router\] tie_break"),
        ("[router]\nload_weight = -1\n", r"\[router\] load_weight"),
        ("[workload]\nturns = [5, 2]\n", r"\[workload\] turns: expected \[min, max\]"),
        ("[workload]\nkind = 'batch'\n", r"\[workload\] kind"),
        ("[workload]\nrequests = true\n", r"\[workload\] requests"),
        ("[failures]\ndrop_batches = 1.0\n", r"\[failures\] drop_batches"),
        ("[failures]\nrouter_ignores_salt = true\n", r"\[failures\] router_ignores_salt: needs tenant_salt"),
        (
            "[workload]\n[[workload.system_prompt]]\ntext = 'a'\nprompt = '1:5'\n",
            r"system_prompt\[0\]: give exactly one",
        ),
        ("[workload]\n[[workload.system_prompt]]\nprompt = 'x:y'\n", r"system_prompt\[0\].prompt"),
        ("[fleet]\ninstances = 16\nnum_blocks = 100000\n", r"\[fleet\] num_blocks: 16 instances"),
        ("fleet = 3\n", r"\[fleet\] must be a table"),
        ("[engine]\n", r"engine: unknown top-level key"),
        ("[fleet\n", r"not valid TOML"),
    ],
)
def test_bad_config_names_the_field(text, message):
    with pytest.raises(BadInput, match=message):
        parse_fleet_text(text, "f.toml")


def test_explicit_system_prompts():
    cfg = parse_fleet_text(
        "[workload]\nrequests = 5\n[[workload.system_prompt]]\nprompt = '0:300'\n[[workload.system_prompt]]\nprompt = [5, 6, 7]\n"
    )
    assert cfg.workload.system_prompts == 2
    s = build_stream(cfg)
    assert all(q.tokens[:300] == tuple(range(300)) or q.tokens[:3] == (5, 6, 7) for q in s.requests)
    assert parse_fleet_text(cfg.to_toml()) == cfg
