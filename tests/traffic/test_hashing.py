"""Block hashes of trace prompts: the per-chain shortcut is exact (explorer.traffic.hashing)."""

from __future__ import annotations

import random

import pytest

from explorer.core.hashing import init_none_hash
from explorer.core.kv_cache_utils import get_request_block_hasher
from explorer.core.request import Request
from explorer.traffic.hashing import PromptHasher, output_block_hashes, prepare
from explorer.traffic.trace import TraceRequest, expand_prompt
from tests.traffic.helpers import line, trace_of


def test_outputs_blocks_are_hashed_like_the_engine():
    """The simulators' output-block hashes are the ones the engine's Request computes."""
    ctx = init_none_hash("sha256", None)
    tr = trace_of([line([5, 6], 530, out=40), line([5], 32, out=1), line([7], 16, out=0)])
    prep = prepare(tr, 16, outputs=True, need_output_hashes=True)
    hasher = get_request_block_hasher(16, ctx)
    for req, ph, oh in zip(tr.requests, prep.prompt_hashes, prep.output_hashes):
        r = Request("x", expand_prompt(req), block_hasher=hasher)
        assert r.block_hashes == ph
        for _ in range(max(req.output_length - 1, 0)):
            r.append_output_token_ids(0)
        assert r.block_hashes == ph + oh
        assert oh == output_block_hashes(req, ph, 16, ctx)


@pytest.mark.parametrize("block_size", [1, 7, 16, 100, 512, 1000])
def test_prompt_hasher_equals_the_request_hasher(block_size):
    rng = random.Random(block_size)
    ctx = init_none_hash("sha256", None)
    hasher = get_request_block_hasher(block_size, ctx)
    ph = PromptHasher(block_size, ctx)
    # chains that share prefixes, plus an inconsistent trace (id 9 under two parents)
    chains = [[1, 2, 3], [1, 2, 4], [1, 2], [9, 2, 3], [1, 9], [2, 9, 9]]
    reqs = []
    for _ in range(25):
        ids = tuple(rng.choice(chains))
        n = rng.randint(1, 512 * len(ids))
        reqs.append(TraceRequest(1, 0, n, 0, ids[: -(-n // 512)]))
    for req in reqs + reqs:  # the second pass comes from the memo
        expected = Request("x", expand_prompt(req), block_hasher=hasher).block_hashes
        assert ph.prompt_hashes(req) == expected


def test_each_distinct_trace_block_is_hashed_once():
    ctx = init_none_hash("sha256", None)
    ph = PromptHasher(16, ctx)
    for _ in range(3):
        ph.prompt_hashes(TraceRequest(1, 0, 1024, 0, (4, 5)))
    assert ph.blocks_hashed == 64
