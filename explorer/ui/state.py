"""The explorer's session model, its URL form and the replay it stands for (no Streamlit here).

A view is fully described by `ViewState`: which scenario (a lesson name or an uploaded file),
the engine settings the user changed, the playground's edits (raw step dicts appended to the
scenario), the step shown, the drawn xxhash seed and presenter mode. The URL carries all of it
(`to_query` / `from_query`), so a link opens the same view. The page replays
scenario + edits; nothing ever mutates an engine by hand.

Everything read from a URL or an upload is untrusted: sizes are capped before decoding, the
edits are JSON (never pickle or eval) and go through the scenario parser like any TOML step.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from explorer.core.hashing import HASH_ALGOS, NON_CRYPTO_HASH_ALGOS
from explorer.core.release import RELEASES
from explorer.errors import BadInput
from explorer.numbers import is_int
from explorer.scenario.budget import check_replay_budget
from explorer.scenario.parse import parse_scenario_bytes, with_steps
from explorer.scenario.spec import Limits, Scenario, replace_engine_seed
from explorer.scenario.trace import Trace
from explorer.scenario.write import scenario_to_toml
from explorer.ui.blank_pool import BLANK_POOL, BLANK_POOL_SOURCE, BLANK_POOL_TOML
from explorer.ui.step_settings import (
    BLANK_ENGINE,
    BLANK_ENGINE_SOURCE,
    BLANK_ENGINE_TOML,
    STEP_KEYS,
    apply_engine,
    check_step_setting,
    step_from_query,
    step_query,
)
from explorer.ui.url_blob import URL_BLOB_CAP, decode_blob, encode_blob

LESSONS_DIR = Path(__file__).resolve().parents[2] / "lessons"
DEFAULT_LESSON = "00_two_chat_turns"

# Per-session values of the CLI's caps (the parser's and explorer/scenario/budget.py's, far larger
# there); snapshot cells: block entries in the snapshots of one replay.
UI_LIMITS = Limits(
    max_prompt_tokens=65_536, max_total_tokens=1 << 19, max_steps=600, max_blocks=8_192, max_snapshot_cells=1_500_000
)
MAX_UPLOAD_BYTES = 256 * 1024
MAX_REQUESTS = 256  # arrive ops in one session's scenario
MAX_EDITS = 200  # playground steps
MAX_BLOCK_SIZE = 1024
MAX_GENERATE = 4_096

ENGINE_KEYS = ("block_size", "num_blocks", "hash_algo", "hash_seed", "enable_prefix_caching", "vllm")


# ---- the view ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ViewState:
    lesson: str | None = DEFAULT_LESSON  # lessons/<name>.toml; None when `upload` is set
    upload: tuple[str, bytes] | None = None  # (file name, bytes) of an uploaded scenario
    engine: Mapping[str, Any] = field(default_factory=dict)  # settings the user changed
    edits: tuple[Mapping[str, Any], ...] = ()  # playground steps, appended to the scenario
    step: int = 0
    drawn_seed: str | None = None  # this session's xxhash seed (when the scenario sets none)
    presenter: bool = False
    block: int | None = None  # the block whose history is open

    def with_(self, **changes: Any) -> ViewState:
        return replace(self, **changes)


def list_lessons(directory: Path = LESSONS_DIR) -> list[str]:
    """Lesson names (file stems) of lessons/*.toml, sorted."""
    try:
        return sorted(p.stem for p in directory.glob("*.toml") if p.is_file())
    except OSError:
        return []


def check_lesson_name(name: str, directory: Path = LESSONS_DIR) -> str:
    """A lesson name from a URL or a picker: a plain stem that exists (no paths)."""
    if not isinstance(name, str) or not name or len(name) > 120 or "/" in name or "\\" in name or name.startswith("."):
        raise BadInput(f"no lesson named {name!r}")
    if name not in (BLANK_POOL, BLANK_ENGINE) and not (directory / f"{name}.toml").is_file():
        raise BadInput(f"no lesson named {name!r} (lessons: {', '.join(list_lessons(directory)) or 'none'})")
    return name


def check_engine(engine: Mapping[str, Any]) -> dict[str, Any]:
    """Validate the engine settings a user or a link changed; BadInput names the bad one."""
    out: dict[str, Any] = {}
    for key, value in engine.items():
        if key in STEP_KEYS:  # the engine-step playground's (explorer.ui.step_settings)
            out[key] = check_step_setting(key, value)
            continue
        if key not in ENGINE_KEYS:
            raise BadInput(f"unknown engine setting {key!r}")
        if key == "block_size":
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_BLOCK_SIZE:
                raise BadInput(f"block size must be an integer from 1 to {MAX_BLOCK_SIZE}, got {value!r}")
        elif key == "num_blocks":
            if isinstance(value, bool) or not isinstance(value, int) or not 2 <= value <= UI_LIMITS.max_blocks:
                raise BadInput(f"number of blocks must be an integer from 2 to {UI_LIMITS.max_blocks:,}, got {value!r}")
        elif key == "hash_algo":
            if value not in HASH_ALGOS:
                raise BadInput(f"hash algorithm must be one of {', '.join(HASH_ALGOS)}, got {value!r}")
        elif key == "hash_seed":
            if not isinstance(value, str) or len(value) > 256:
                raise BadInput("hash seed must be a string of at most 256 characters")
        elif key == "enable_prefix_caching" and not isinstance(value, bool):
            raise BadInput("prefix caching must be on or off")
        elif key == "vllm" and value not in RELEASES:
            raise BadInput(f"the vLLM release must be one of {', '.join(RELEASES)}, got {str(value)[:20]!r}")
        out[key] = value
    return out


def check_edits(edits: Any) -> tuple[dict[str, Any], ...]:
    """Playground edits from a link: a list of flat JSON tables (the parser checks the rest)."""
    if not isinstance(edits, list):
        raise BadInput("the link's playground edits are not a list of steps")
    if len(edits) > MAX_EDITS:
        raise BadInput(f"the link has {len(edits)} playground steps, more than the limit {MAX_EDITS}")
    out = []
    for i, e in enumerate(edits):
        if not isinstance(e, dict) or not all(isinstance(k, str) for k in e):
            raise BadInput(f"the link's playground step {i + 1} is not a table")
        out.append(e)
    return tuple(out)


# ---- URL form ---------------------------------------------------------------------------------

_ENGINE_PARAMS = {
    "bs": "block_size",
    "nb": "num_blocks",
    "algo": "hash_algo",
    "seed": "hash_seed",
    "pc": "enable_prefix_caching",
    "vllm": "vllm",
}


def to_query(view: ViewState) -> tuple[dict[str, str], list[str]]:
    """The URL parameters of a view, and warnings for what did not fit into a link."""
    q: dict[str, str] = {}
    warnings: list[str] = []
    if view.upload is not None:
        blob = encode_blob({"name": view.upload[0], "toml": view.upload[1].decode("utf-8", "replace")})
        if len(blob) <= URL_BLOB_CAP:
            q["up"] = blob
        else:
            warnings.append("The uploaded scenario is too big for a link: download it as a scenario file to share it.")
    elif view.lesson:
        q["lesson"] = view.lesson
    for short, key in _ENGINE_PARAMS.items():
        if key in view.engine:
            v = view.engine[key]
            q[short] = ("1" if v else "0") if isinstance(v, bool) else str(v)
    q.update(step_query(view.engine))
    if view.drawn_seed:
        q["dseed"] = view.drawn_seed
    if view.edits:
        blob = encode_blob(list(view.edits))
        if len(blob) <= URL_BLOB_CAP:
            q["ed"] = blob
        else:
            warnings.append(
                f"The playground's edits need {len(blob):,} characters, more than a link holds ({URL_BLOB_CAP:,}): "
                "the link leaves them out. Download the session as a scenario file to share them."
            )
    q["step"] = str(view.step)
    if view.presenter:
        q["presenter"] = "1"
    if view.block is not None:
        q["block"] = str(view.block)
    return q, warnings


def _int_param(q: Mapping[str, str], name: str, what: str) -> int | None:
    v = q.get(name)
    if v is None:
        return None
    v = v.strip()
    if not is_int(v) or v.startswith("-") or len(v) > 9:
        raise BadInput(f"the link's {what} ({name}={v[:20]!r}) is not a number (ASCII digits 0-9)")
    return int(v)


def from_query(q: Mapping[str, str], base: ViewState | None = None) -> tuple[ViewState, list[str]]:
    """A view from URL parameters; each bad parameter is dropped with one error message."""
    view = base or ViewState()
    errors: list[str] = []

    def attempt(fn: Callable[[], None]) -> None:
        try:
            fn()
        except BadInput as e:
            errors.append(str(e)[0].upper() + str(e)[1:])

    def scenario() -> None:
        nonlocal view
        if "up" in q:
            d = decode_blob(q["up"], "uploaded scenario")
            if not isinstance(d, dict) or not isinstance(d.get("name"), str) or not isinstance(d.get("toml"), str):
                raise BadInput("the link's uploaded scenario is not valid")
            raw = d["toml"].encode("utf-8")
            if len(raw) > MAX_UPLOAD_BYTES:
                raise BadInput("the link's uploaded scenario is too big")
            view = view.with_(lesson=None, upload=(d["name"][:120], raw))
        elif "lesson" in q:
            view = view.with_(lesson=check_lesson_name(q["lesson"]), upload=None)

    def engine() -> None:
        nonlocal view
        eng: dict[str, Any] = {}
        for short, key in _ENGINE_PARAMS.items():
            if short not in q:
                continue
            v = q[short]
            if key in ("block_size", "num_blocks"):
                eng[key] = _int_param(q, short, key.replace("_", " "))
            elif key == "enable_prefix_caching":
                if v not in ("0", "1"):
                    raise BadInput(f"the link's prefix caching setting ({short}={v[:10]!r}) must be 0 or 1")
                eng[key] = v == "1"
            else:
                eng[key] = v
        view = view.with_(engine=check_engine(eng))

    def step_settings() -> None:
        nonlocal view
        settings, bad = step_from_query(q)  # one message per bad parameter
        errors.extend(bad)
        if settings:
            view = view.with_(engine={**view.engine, **settings})

    def edits() -> None:
        nonlocal view
        if "ed" in q:
            view = view.with_(edits=check_edits(decode_blob(q["ed"], "playground edits")))

    def rest() -> None:
        nonlocal view
        if "dseed" in q:
            s = q["dseed"]
            if not isinstance(s, str) or not 1 <= len(s) <= 256:
                raise BadInput("the link's drawn seed is not valid")
            view = view.with_(drawn_seed=s)
        step = _int_param(q, "step", "step")
        if step is not None:
            view = view.with_(step=step)
        view = view.with_(presenter=q.get("presenter") == "1")
        block = _int_param(q, "block", "block")
        view = view.with_(block=block)

    for fn in (scenario, engine, step_settings, edits, rest):
        attempt(fn)
    return view, errors


# ---- scenario and replay ----------------------------------------------------------------------


def base_bytes(view: ViewState) -> tuple[str, bytes]:
    """(source name, TOML bytes) of the view's scenario before settings and edits."""
    if view.upload is not None:
        name, raw = view.upload
        if len(raw) > MAX_UPLOAD_BYTES:
            raise BadInput(f"{name}: {len(raw):,} bytes, more than the upload limit of {MAX_UPLOAD_BYTES // 1024} KiB")
        return name, raw
    name = check_lesson_name(view.lesson or DEFAULT_LESSON)
    if name == BLANK_POOL:
        return BLANK_POOL_SOURCE, BLANK_POOL_TOML
    if name == BLANK_ENGINE:
        return BLANK_ENGINE_SOURCE, BLANK_ENGINE_TOML
    path = LESSONS_DIR / f"{name}.toml"
    try:
        return f"lessons/{name}.toml", path.read_bytes()
    except OSError as e:
        raise BadInput(f"lessons/{name}.toml: cannot read it ({e.strerror})") from None


def parse_base(source: str, raw: bytes) -> Scenario:
    try:
        return parse_scenario_bytes(raw, source, UI_LIMITS)
    except RecursionError:
        raise BadInput(f"{source}: nested too deeply to be a scenario") from None


def needs_drawn_seed(scenario: Scenario) -> bool:
    """xxhash with no seed: vLLM draws a random one; the session keeps one so reruns agree."""
    e = scenario.engine
    return e.enable_prefix_caching and e.hash_algo in NON_CRYPTO_HASH_ALGOS and not e.hash_seed


def check_size(scenario: Scenario) -> None:
    arrivals = sum(1 for op in scenario.ops if op.op == "arrive")
    if arrivals > MAX_REQUESTS:
        raise BadInput(f"{scenario.source}: {arrivals} requests, more than the limit of {MAX_REQUESTS} per session")
    # The replay caps the CLI applies (snapshots, engine-step records, recorded decodes), counted
    # before anything runs, under the page's limits.
    check_replay_budget(scenario, UI_LIMITS, record=True, cli=False)


def effective_scenario(
    base: Scenario, engine: Mapping[str, Any], edits: tuple[Mapping[str, Any], ...], drawn_seed: str | None
) -> Scenario:
    """Base scenario + changed settings + playground edits (+ the session's drawn seed)."""
    sc = base
    if engine:
        sc = apply_engine(sc, check_engine(engine), UI_LIMITS)
    if edits:
        if len(edits) > MAX_EDITS:
            raise BadInput(f"more than {MAX_EDITS} playground steps: clear some first")
        sc = with_steps(sc, list(edits), UI_LIMITS)
    if needs_drawn_seed(sc) and drawn_seed:
        sc = replace_engine_seed(sc, drawn_seed)
    check_size(sc)
    return sc


@dataclass(frozen=True)
class Replayed:
    trace: Trace
    error: str | None  # the step that stopped the replay, if one did


def replay_until_error(scenario: Scenario) -> Replayed:
    """Replay every step; a step that cannot run (bad input for the engine's state) ends the
    replay there, and the steps before it are kept so the page can still show them."""
    from explorer.scenario.checkpoints import run_ops
    from explorer.scenario.engine import engine_for

    trace, error = run_ops(engine_for(scenario), scenario.ops, catch=BadInput)
    return Replayed(trace, error)


def build(view: ViewState) -> tuple[Scenario, Replayed]:
    """The view's scenario and its replay, uncached (the page caches per session)."""
    source, raw = base_bytes(view)
    sc = effective_scenario(parse_base(source, raw), view.engine, view.edits, view.drawn_seed)
    return sc, replay_until_error(sc)


def session_toml(scenario: Scenario) -> str:
    """The session as a scenario file: settings, drawn seed and playground steps included."""
    return scenario_to_toml(scenario)


def session_json(trace: Trace) -> str:
    """The replay JSON of design section 5."""
    return json.dumps(trace.to_json(), indent=1)


def replay_key(
    source: str, raw: bytes, engine: Mapping[str, Any], edits: Sequence[Mapping[str, Any]], drawn_seed: str | None
) -> str:
    h = hashlib.sha256()
    for part in (
        source.encode(),
        raw,
        json.dumps(dict(engine), sort_keys=True).encode(),
        json.dumps(list(edits), sort_keys=True, default=str).encode(),
        (drawn_seed or "").encode(),
    ):
        h.update(len(part).to_bytes(8, "big"))
        h.update(part)
    return h.hexdigest()


def live_requests(trace: Trace) -> list[str]:
    """Ids of requests still live after the last step (what the playground can act on)."""
    return [r.request_id for r in trace.final.requests]


def next_request_id(scenario: Scenario) -> str:
    used = {op.id for op in scenario.ops if op.id}
    i = 1
    while f"P{i}" in used:
        i += 1
    return f"P{i}"
