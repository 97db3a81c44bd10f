"""Write a scenario back out as TOML (tomllib only reads).

Scenario values are few kinds: strings, integers, booleans, arrays of integers or strings,
and small tables (mm items, expect); the parser refuses every other kind (a TOML datetime in an
`expect`, for one), so this writer handles every value a parsed scenario can hold, and
``parse_scenario_text(scenario_to_toml(s))`` gives ``s`` back. Strings are TOML basic strings
with every control character escaped (U+0000 to U+001F and U+007F, which TOML forbids raw); a
lone surrogate, which no TOML file can hold, is a `BadInput` (the parser refuses those too).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from explorer.errors import BadInput
from explorer.scenario.spec import Scenario

_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}
_NEEDS_ESCAPE = re.compile(r'["\\\x00-\x1f\x7f]')
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def toml_string(text: str) -> str:
    """``text`` as a TOML basic string."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise BadInput(f"cannot write a lone surrogate (character {e.start}) into TOML") from None
    body = _NEEDS_ESCAPE.sub(lambda m: _ESCAPES.get(m.group(), f"\\u{ord(m.group()):04x}"), text)
    return f'"{body}"'


def toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, str):
        return toml_string(v)
    if isinstance(v, Mapping):
        return "{" + ", ".join(f"{_key(k)} = {toml_value(x)}" for k, x in v.items()) + "}"
    if isinstance(v, Sequence):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    raise TypeError(f"cannot write {type(v).__name__} as TOML")


def _key(k: str) -> str:
    return k if _BARE_KEY.fullmatch(k) else toml_string(k)


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
