"""Mooncake traces: expansion, the skip rule, bad lines, the shipped trace (explorer.traffic.trace)."""

from __future__ import annotations

import pytest

from explorer.errors import BadInput
from explorer.traffic.trace import (
    TraceRequest,
    expand_prompt,
    expand_tokens,
    is_skipped,
    load_trace,
    shipped_trace_path,
)
from tests.traffic.helpers import BAD_LINES, REPO, line, trace_of


def test_expansion_token_j_of_block_i():
    req = TraceRequest(1, 0, 600, 1, (3, 7))
    toks = expand_prompt(req)
    assert len(toks) == 600
    assert toks[:512] == list(range(3 * 512, 4 * 512))
    assert toks[512:] == list(range(7 * 512, 7 * 512 + 88))
    assert expand_tokens((3, 7), 500, 520) == toks[500:520]


def test_only_the_ids_the_prompt_reaches_are_kept():
    tr = trace_of([line([1, 2, 3], 512)])
    assert tr.requests[0].hash_ids == (1,)


def test_skip_rule_with_and_without_outputs():
    # 9 usable blocks of 16 tokens = 144 slots.
    a = TraceRequest(1, 0, 128, 17, (0,))  # 128 + 16 = 144 slots: fits exactly
    b = TraceRequest(2, 0, 128, 18, (0,))  # 145 slots: skipped with outputs
    c = TraceRequest(3, 0, 145, 0, (0,))  # 145 prompt tokens: always skipped
    d = TraceRequest(4, 0, 144, 0, (0,))  # output 0 adds nothing
    assert not is_skipped(a, 16, 10, True) and not is_skipped(b, 16, 10, False)
    assert is_skipped(b, 16, 10, True)
    assert is_skipped(c, 16, 10, False) and is_skipped(c, 16, 10, True)
    assert not is_skipped(d, 16, 10, True)


@pytest.mark.parametrize("bad,where,what", BAD_LINES)
def test_bad_lines_in_process(bad, where, what):
    with pytest.raises(BadInput) as e:
        trace_of([line([0], 10), bad])
    assert where in str(e.value) and what in str(e.value)


def test_shipped_trace_is_the_documented_one():
    tr = load_trace(shipped_trace_path())
    assert len(tr.requests) == 3993 and tr.prompt_tokens == 61_194_628
    readme = (REPO / "data" / "README.md").read_text()
    assert "kvcache-ai/Mooncake" in readme and "FAST25-release/traces/synthetic_trace.jsonl" in readme
    assert "Apache" in readme
