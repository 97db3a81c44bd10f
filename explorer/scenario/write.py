"""Write a scenario back out as TOML (tomllib only reads).

Scenario values are few kinds: strings, integers, booleans, arrays of integers or strings,
and small tables (mm items, expect). That is all this writer handles.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from explorer.scenario.spec import Scenario


def toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, str):
        # JSON string escapes are valid TOML basic-string escapes.
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, Mapping):
        return "{" + ", ".join(f"{_key(k)} = {toml_value(x)}" for k, x in v.items()) + "}"
    if isinstance(v, Sequence):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    raise TypeError(f"cannot write {type(v).__name__} as TOML")


def _key(k: str) -> str:
    return k if k.replace("_", "").replace("-", "").isalnum() and k.isascii() else json.dumps(k)


def dumps_scenario(title: str, description: str, engine: Mapping[str, Any], steps: Sequence[Mapping[str, Any]]) -> str:
    lines = [f"title = {toml_value(title)}"]
    if description:
        lines.append(f"description = {toml_value(description)}")
    lines += ["", "[engine]"]
    lines += [f"{_key(k)} = {toml_value(v)}" for k, v in engine.items()]
    for step in steps:
        lines += ["", "[[steps]]"]
        lines += [f"{_key(k)} = {toml_value(v)}" for k, v in step.items()]
    return "\n".join(lines) + "\n"


def scenario_to_toml(scenario: Scenario) -> str:
    """A scenario as TOML again (the session download): its tables as they were read."""
    return dumps_scenario(scenario.title, scenario.description, scenario.engine_dict(), scenario.raw_steps)
