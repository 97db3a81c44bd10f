"""The op classes (explorer/scenario/ops.py): parsing builds one class per op with only its own
fields, every op name of the TOML has its class, and the classes are frozen."""

from __future__ import annotations

import dataclasses
import typing

import pytest

from explorer.scenario import ops
from explorer.scenario.parse import parse_scenario_dict, parse_scenario_text
from explorer.scenario.spec import OP_KEYS, OPS
from explorer.scenario.write import scenario_to_toml

MANAGER = {
    "engine": {"block_size": 4, "num_blocks": 40},
    "steps": [
        {"op": "arrive", "id": "A", "prompt": "1:10", "cache_salt": "s"},
        {"op": "admit", "id": "A", "tokens": 4},
        {"op": "admit", "id": "A"},
        {"op": "sample", "id": "A", "tokens": [7, 8]},
        {"op": "decode", "id": "A"},
        {"op": "generate", "id": "A", "tokens": "20:23"},
        {"op": "preempt", "id": "A"},
        {"op": "reset", "running": True},
        {"op": "finish", "id": "A"},
    ],
}
ENGINE_STEPS = {
    "engine": {"block_size": 4, "num_blocks": 40},
    "steps": [
        {"op": "arrive", "id": "A", "prompt": [1, 2, 3, 4, 5], "output": [9, 9]},
        {"op": "step"},
        {"op": "abort", "id": "A"},
        {"op": "reset", "external": True},
    ],
}


def _classes() -> list[type]:
    return list(typing.get_args(ops.Op))


def test_every_op_name_has_a_class_and_every_class_a_name():
    names = {c.op for c in _classes()}
    assert names == set(OPS)
    # two classes share a name only as the manager-level and engine-step kinds of one op
    assert sorted(c.op for c in _classes() if [d.op for d in _classes()].count(c.op) > 1) == [
        "arrive",
        "arrive",
        "reset",
        "reset",
    ]


def test_a_class_holds_only_the_keys_its_op_takes():
    base = {f.name for f in dataclasses.fields(ops.OpBase)}
    for cls in _classes():
        own = {f.name for f in dataclasses.fields(cls)} - base
        assert own <= OP_KEYS[cls.op] | {"ext"}, cls  # ext: the connector keys of an arrive, read together


def test_parsing_builds_the_class_of_each_op():
    sc = parse_scenario_dict(MANAGER)
    assert [type(op) for op in sc.ops] == [
        ops.Arrive,
        ops.Admit,
        ops.Admit,
        ops.Sample,
        ops.Decode,
        ops.Generate,
        ops.Preempt,
        ops.Reset,
        ops.Finish,
    ]
    arrive, chunk, rest, sample, _, generate, _, reset, _ = sc.ops
    assert isinstance(arrive, ops.Arrive) and arrive.prompt == tuple(range(1, 10)) and arrive.cache_salt == "s"
    assert isinstance(chunk, ops.Admit) and chunk.tokens == 4
    assert isinstance(rest, ops.Admit) and rest.tokens is None
    assert isinstance(sample, ops.Sample) and sample.tokens == (7, 8)
    assert isinstance(generate, ops.Generate) and generate.tokens == (20, 21, 22)
    assert isinstance(reset, ops.Reset) and reset.running and reset.id is None
    assert [op.label for op in sc.ops[:2]] == ["step 1 (arrive A)", "step 2 (admit A)"]


def test_an_engine_step_scenario_builds_the_engine_step_classes():
    sc = parse_scenario_dict(ENGINE_STEPS)
    assert [type(op) for op in sc.ops] == [ops.EngineArrive, ops.StepOp, ops.Abort, ops.EngineReset]
    arrive, _, _, reset = sc.ops
    assert isinstance(arrive, ops.EngineArrive) and arrive.output == (9, 9) and arrive.accepted is None
    assert isinstance(reset, ops.EngineReset) and reset.external and not reset.running
    assert [d["op"] for d in sc.normalized(None)["ops"]] == ["arrive", "step", "abort", "reset"]


@pytest.mark.parametrize("raw", [MANAGER, ENGINE_STEPS])
def test_ops_are_frozen_and_written_back_equal(raw):
    sc = parse_scenario_dict(raw)
    with pytest.raises(dataclasses.FrozenInstanceError):
        sc.ops[0].id = "B"  # type: ignore[misc]
    written = parse_scenario_text(scenario_to_toml(sc))
    assert written.ops == sc.ops
    assert written.normalized(None) == sc.normalized(None)
