"""The engine-step playground's settings (design sections 7 and 10), without Streamlit: the
scheduler keys and the KV connector a user changes, their URL form, and the empty engine-step
scenario a playground starts from.

Every value is checked by the scenario parser's own functions (``parse_sched``,
``parse_connector``) one key at a time, so a link's bad parameter gets that parser's message and
nothing else is dropped; the combination (a budget below ``max_num_seqs``, a connector with
hybrid groups) is checked when the scenario is parsed with the settings applied.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from explorer.errors import BadInput
from explorer.numbers import is_int
from explorer.scenario.parse import parse_scenario_dict
from explorer.scenario.parse_connector import ConnectorSpec, parse_connector
from explorer.scenario.spec import MAX_MODEL_LEN, Limits, Scenario
from explorer.scenario.step_spec import MAX_BUDGET, SCHED_DEFAULTS, parse_sched

SCHED_KEYS = tuple(SCHED_DEFAULTS)
CONNECTOR_KEY = "kv_connector"
STEP_KEYS = (*SCHED_KEYS, CONNECTOR_KEY)
# URL parameter -> setting; `kv` is "none", "static[:load[:policy]]" or "offloading:N[:policy]".
STEP_PARAMS = {
    "sched": "scheduler",
    "mnbt": "max_num_batched_tokens",
    "mns": "max_num_seqs",
    "lpt": "long_prefill_token_threshold",
    "kv": CONNECTOR_KEY,
}
NO_CONNECTOR = "none"

BLANK_ENGINE = "blank_engine"
BLANK_ENGINE_TITLE = "Blank engine"
BLANK_ENGINE_SOURCE = "blank engine"
# One idle `step` makes it an engine-step scenario (vLLM's defaults otherwise).
BLANK_ENGINE_TOML = f'''title = "{BLANK_ENGINE_TITLE}"
description = "An empty engine: the scheduler steps, and the playground's arrivals and steps are the scenario."

[[steps]]
op = "step"
note = "The engine steps with no request: nothing to do."
'''.encode()


def _fail(where: str, message: str) -> BadInput:
    return BadInput(f"{where}: {message}")


def connector_spec(value: Mapping[str, Any]) -> ConnectorSpec:
    """A connector table checked as the scenario parser checks ``engine.kv_connector``."""
    spec = parse_connector(_fail, {CONNECTOR_KEY: value}, True)
    assert spec is not None  # the key is given
    return spec


def check_step_setting(key: str, value: Any) -> Any:
    """One engine-step setting, checked by the parser alone (the other keys permissive, so
    the message is about this one); a connector comes back normalised, None means "no
    connector"."""
    if key == CONNECTOR_KEY:
        return None if value is None else connector_spec(value).as_dict()
    if key not in SCHED_KEYS:
        raise BadInput(f"unknown engine setting {key!r}")
    others = {"max_num_batched_tokens": MAX_BUDGET, "max_num_seqs": 1}
    others.pop(key, None)
    parse_sched(_fail, {**others, key: value}, True, MAX_MODEL_LEN)
    return value


def base_value(base: Scenario, key: str) -> Any:
    """What the scenario itself sets for an engine-step setting (a connector as a table)."""
    if key == CONNECTOR_KEY:
        return base.connector.as_dict() if base.connector is not None else None
    sched = base.sched.as_dict() if base.sched is not None else SCHED_DEFAULTS
    return sched[key]


def apply_engine(scenario: Scenario, changes: Mapping[str, Any], limits: Limits) -> Scenario:
    """The same steps under changed settings, re-parsed (``kv_connector = None`` removes the
    connector)."""
    engine = {**scenario.engine_dict(), **changes}
    if engine.get(CONNECTOR_KEY, 0) is None:
        del engine[CONNECTOR_KEY]
    raw = {
        "title": scenario.title,
        "description": scenario.description,
        "engine": engine,
        "steps": [dict(s) for s in scenario.raw_steps],
    }
    return parse_scenario_dict(raw, scenario.source, limits)


def connector_param(value: Mapping[str, Any] | None) -> str:
    if value is None:
        return NO_CONNECTOR
    spec = connector_spec(value)
    policy = [] if spec.failure_policy == "fail" else [spec.failure_policy]
    if spec.kind == "offloading":
        return ":".join(["offloading", str(spec.cpu_blocks), *policy])
    load = [spec.load] if policy or spec.load != "async" else []
    return ":".join(["static", *load, *policy])


def step_query(engine: Mapping[str, Any]) -> dict[str, str]:
    """The URL parameters of the engine-step settings in ``engine``."""
    q = {}
    for short, key in STEP_PARAMS.items():
        if key in engine:
            v = engine[key]
            q[short] = connector_param(v) if key == CONNECTOR_KEY else str(v)
    return q


def _parse_connector_param(v: str) -> dict[str, Any] | None:
    if v == NO_CONNECTOR:
        return None
    parts = v.split(":")
    if parts[0] == "offloading":
        if len(parts) < 2 or not is_int(parts[1]) or len(parts[1]) > 9:
            raise BadInput("offloading needs the CPU tier's size in blocks: offloading:N")
        d: dict[str, Any] = {"kind": "offloading", "cpu_blocks": int(parts[1])}
        extra = parts[2:]
        names = ["failure_policy"]
    else:
        d = {"kind": parts[0]}
        extra = parts[1:]
        names = ["load", "failure_policy"]
    if len(extra) > len(names):
        raise BadInput("too many parts (static[:load[:policy]] or offloading:N[:policy])")
    d.update(zip(names, extra, strict=False))
    return d


def step_from_query(q: Mapping[str, str]) -> tuple[dict[str, Any], list[str]]:
    """The engine-step settings of a link, each checked alone: a bad one is left out with one
    message naming the parameter, the others are kept."""
    out: dict[str, Any] = {}
    errors: list[str] = []
    for short, key in STEP_PARAMS.items():
        if short not in q:
            continue
        v = q[short].strip()[:60]
        try:
            if key == CONNECTOR_KEY:
                value: Any = _parse_connector_param(v)
            elif key == "scheduler":
                value = v
            else:
                if not is_int(v) or v.startswith("-") or len(v) > 9:
                    raise BadInput(f"expected a number (ASCII digits 0-9), got {v[:20]!r}")
                value = int(v)
            out[key] = check_step_setting(key, value)
        except BadInput as e:
            msg = str(e)
            errors.append(f"The link's {key.replace('_', ' ')} ({short}={v[:20]!r}) is not valid: {msg}")
    return out, errors
