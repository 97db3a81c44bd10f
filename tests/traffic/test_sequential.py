"""The default policy through the engine: exact hits derived by hand (explorer.traffic.sequential)."""

from __future__ import annotations

from explorer.traffic.hashing import prepare
from explorer.traffic.sequential import replay_vllm, replay_vllm_plain
from tests.traffic.helpers import HAND, HAND_HITS, line, trace_of


def test_hand_derived_hits_through_the_engine():
    prep = prepare(trace_of(HAND), 16)
    r = replay_vllm(prep, 10)
    assert r.hits == HAND_HITS
    assert (r.requests, r.skipped, r.prompt_tokens, r.hit_tokens) == (8, 1, 1105, 272)
    # the plain path (each request hashed by the core's request hasher) agrees
    assert replay_vllm_plain(trace_of(HAND), 16, 10).hits == HAND_HITS


def test_outputs_pending_last_token_fits_exactly():
    # 128 + 17 outputs: the 17th sampled token is never computed, so 9 blocks suffice.
    tr = trace_of([line([0], 128, out=17), line([0], 128, out=18), line([0], 100, out=5)])
    prep = prepare(tr, 16, outputs=True)
    r = replay_vllm(prep, 10)
    assert r.skipped == 1
    # third request: cap (100-1)//16 = 6 blocks, all cached by the first request
    assert r.hits == [0, 0, 96]
