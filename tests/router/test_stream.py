"""Request streams and the router's tokenizer (explorer.router.stream)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from explorer.errors import BadInput
from explorer.router.simulate import simulate
from explorer.router.stream import build_stream, tokenize
from tests.router.helpers import SMALL


def test_chat_stream_shares_system_prompts_and_grows_sessions(stream):
    assert len(stream.requests) == 60
    by_session = {}
    for q in stream.requests:
        by_session.setdefault(q.session, []).append(q)
    multi = [qs for qs in by_session.values() if len(qs) > 1]
    assert multi
    for qs in multi:
        a, b = qs[0], qs[1]
        # the next turn resends the conversation: previous prompt + reply + a new message
        assert b.tokens[: len(a.tokens) + len(a.output)] == a.tokens + a.output
    assert all(q.arrival_ms <= r.arrival_ms for q, r in zip(stream.requests, stream.requests[1:]))


def test_trace_stream_from_uploaded_bytes():
    import json

    lines = [
        {"timestamp": 0, "input_length": 600, "output_length": 3, "hash_ids": [1, 2]},
        {"timestamp": 5, "input_length": 700, "output_length": 2, "hash_ids": [1, 2]},
        {"timestamp": 9, "input_length": 300, "output_length": 2, "hash_ids": [7]},
    ]
    data = ("\n".join(json.dumps(x) for x in lines) + "\n").encode()
    cfg = replace(SMALL, workload=replace(SMALL.workload, kind="trace", trace="upload", requests=10))
    sync = replace(cfg, fleet=replace(cfg.fleet, scheduler="sync"))
    res = simulate(sync, data, "tiny.jsonl", policies=("prefix",))
    r = res.runs["prefix"]
    assert res.stream.requests[1].tokens[:600] == res.stream.requests[0].tokens
    # Sync: the first prompt's events go out with step 0 (t=0); the second request, routed
    # before step 1 (t=20), finds them: 37 full blocks of the first prompt, as predicted.
    assert r.instance_of[1] == r.instance_of[0] and r.hit_tokens[1] == r.predicted_tokens[1] == 592
    # Async (vLLM's default): step 0 only queues its batch; its events go out with its update
    # in step 1, after the second request was routed. The router saw nothing and balanced.
    r = simulate(cfg, data, "tiny.jsonl", policies=("prefix",)).runs["prefix"]
    assert r.instance_of[1] != r.instance_of[0] and r.hit_tokens[1] == r.predicted_tokens[1] == 0
    with pytest.raises(BadInput, match="upload"):
        build_stream(cfg)


def test_tokenize():
    assert tokenize("0:3, 7*2") == [0, 1, 2, 7, 7]
    with pytest.raises(BadInput):
        tokenize("   ")
    with pytest.raises(BadInput):
        tokenize("abc", kind="spec")


def test_tokenize_text_uses_smollm2(monkeypatch):
    import explorer.tokens as T

    monkeypatch.setattr(T, "encode_text", lambda text: [len(text), 1])
    assert tokenize("hello", kind="text") == [5, 1]
