"""Talk to vLLM 0.31.0's own classes from the project's test environment.

``VllmOracle`` starts one ``vllm_driver.py`` process inside ``.venv-vllm``
(made by ``tests/conformance/setup_vllm.sh``) on first use and reuses it for
every scenario: importing vLLM takes seconds, a replay milliseconds. An answer asked before
(same driver source, vLLM release and scenario) is read from disk instead (answer_cache.py),
and then no process starts at all.
``compare`` lists field-path differences between our replay JSON and vLLM's.

This module runs in the project's virtualenv; it never imports vLLM.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import queue
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from tests.conformance import answer_cache

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent.parent
DRIVERS = REPO_ROOT / "vllm_drivers"  # the scripts run inside the vLLM virtualenvs
DRIVER = DRIVERS / "vllm_driver.py"
VENV_PYTHON = REPO_ROOT / ".venv-vllm" / "bin" / "python"
SETUP_HINT = "bash tests/conformance/setup_vllm.sh"
# The releases the conformance tier runs against (design section 15): each in its own venv.
RELEASES = ("0.31.0", "0.33.0")
VENV_PYTHONS = {
    "0.31.0": VENV_PYTHON,
    "0.33.0": REPO_ROOT / ".venv-vllm-033" / "bin" / "python",
}
SETUP_HINTS = {"0.31.0": SETUP_HINT, "0.33.0": "bash tests/conformance/setup_vllm_033.sh"}


UNSETTLED_RETRIES = 3


def _unsettled(answer: dict) -> bool:
    """An answer in which vLLM could not build its own configs (a pydantic validation error:
    "Model architectures ['LlamaForCausalLM'] failed to be inspected"). vLLM's model registry
    inspects the model in a subprocess when its on-disk model info is missing or stale, and that
    subprocess can fail on a loaded machine; the registry then remembers the failure for the
    rest of the process (an lru_cache). Such an answer is asked again in a fresh driver process
    (UNSETTLED_RETRIES times), never cached, and never handed to a test as vLLM's answer."""
    return "validation error for" in str(answer.get("error", ""))


def vllm_env(python: Path) -> dict[str, str]:
    """The environment a driver in the virtualenv of ``python`` runs with.

    Each virtualenv keeps vLLM's cache (VLLM_CACHE_ROOT) inside itself: vLLM names its model-info
    file after the model class only, so two releases sharing ``~/.cache/vllm`` overwrite each
    other's file and every driver start of the other release re-inspects the model in a
    subprocess (about 16 s idle, and the step that fails under load)."""
    env = dict(os.environ)
    env.pop("PYTHONHASHSEED", None)
    env.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    env.setdefault("VLLM_CACHE_ROOT", str(python.parent.parent / "vllm-cache"))
    return env


class VllmOracleError(RuntimeError):
    """The oracle could not run: no vLLM venv, or the driver died or hung."""


class VllmReplayError(RuntimeError):
    """vLLM raised while replaying a scenario (the driver's {"error": ...})."""


class VllmOracle:
    """One long-lived driver process; ``replay`` sends a scenario, gets JSON.

    Missing ``.venv-vllm`` is an error, never a skip: the conformance tier
    must fail loudly where the oracle is not installed.
    """

    driver: Path = DRIVER  # the driver script the process runs

    def __init__(
        self,
        python: str | os.PathLike | None = None,
        *,
        startup_timeout: float = 300.0,
        replay_timeout: float = 300.0,
        vllm: str = "0.31.0",
    ):
        # The release this oracle runs (its venv unless ``python`` names another); part of
        # what an answer depends on, beside the driver's source and the scenario.
        self.vllm = vllm
        self.python = Path(python) if python is not None else VENV_PYTHONS[vllm]
        self.startup_timeout = startup_timeout
        self.replay_timeout = replay_timeout
        self._proc: subprocess.Popen | None = None
        self._lines: queue.Queue | None = None
        self._stderr = None
        self._replays = 0

    # ---- process ----------------------------------------------------------

    def _start(self) -> None:
        if not self.python.exists():
            shown = self.python.relative_to(REPO_ROOT) if self.python.is_relative_to(REPO_ROOT) else self.python
            raise VllmOracleError(
                f"vLLM {self.vllm} oracle not installed: {shown} not found; "
                f"install it with `{SETUP_HINTS.get(self.vllm, SETUP_HINT)}`"
            )
        env = vllm_env(self.python)
        self._stderr = tempfile.TemporaryFile(mode="w+b")  # noqa: SIM115 (lives as long as the child process)
        self._proc = subprocess.Popen(
            [str(self.python), str(self.driver)],
            cwd=str(REPO_ROOT),
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            encoding="utf-8",
            bufsize=1,
        )
        self._lines = queue.Queue()
        self._replays = 0
        proc, lines = self._proc, self._lines

        def pump() -> None:
            for line in proc.stdout:
                lines.put(line)
            lines.put(None)  # EOF

        threading.Thread(target=pump, name="vllm-oracle-reader", daemon=True).start()

    def _stderr_tail(self, limit: int = 4000) -> str:
        if self._stderr is None:
            return ""
        try:
            self._stderr.flush()
            self._stderr.seek(0)
            data = self._stderr.read().decode("utf-8", "replace")
        except (OSError, ValueError):
            return ""
        return data[-limit:]

    def _fail(self, what: str) -> VllmOracleError:
        tail = self._stderr_tail()
        self.close()
        msg = f"vLLM oracle driver {what}"
        if tail.strip():
            msg += f"; its stderr ends with:\n{tail}"
        return VllmOracleError(msg)

    def begin_close(self) -> None:
        """Tell the driver to end (its stdin closes) without waiting: ending several drivers
        at once takes as long as the slowest, not the sum (a driver that imported vLLM takes
        seconds to exit)."""
        proc = self._proc
        if proc is not None and proc.stdin and not proc.stdin.closed:
            with contextlib.suppress(OSError):
                proc.stdin.close()

    def close(self) -> None:
        self.begin_close()
        proc, self._proc = self._proc, None
        if proc is not None:
            try:
                proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                proc.kill()
                proc.wait()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def __enter__(self) -> VllmOracle:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- protocol -----------------------------------------------------------

    def replay(self, normalized: dict, *, allow_error: bool = False) -> dict:
        """Replay one normalized scenario through vLLM; the section-5 JSON.

        When vLLM raised, the driver answers ``{"error": "..."}``: that raises
        ``VllmReplayError`` unless ``allow_error`` is set, when it is returned.
        """
        result = self.replay_many([normalized])[0]
        if "error" in result and not allow_error:
            raise VllmReplayError(f"vLLM raised while replaying: {result['error']}")
        return result

    def replay_many(self, scenarios) -> list[dict]:
        """Replay many normalized scenarios, answers in order: each is the section-5 JSON or
        ``{"error": ...}`` (never raised here).

        An answer already on disk for the same driver source, vLLM release and scenario
        (tests/conformance/answer_cache.py) is read instead of asked; the rest go to the driver
        as one pipelined batch, and their answers are stored. Where this driver and release are
        in the sample (EXPLORER_ORACLE_CHECK), the cached ones are asked as well and must be equal.
        """
        lines = [answer_cache.scenario_line(sc) for sc in scenarios]
        release = answer_cache.vllm_release(self.python)
        keys = [None if release is None else answer_cache.answer_key(self.driver, release, ln) for ln in lines]
        answers: list[dict | None] = [None] * len(lines)
        checked: list[int] = []
        if not answer_cache.live():
            check = answer_cache.checks_driver(self.driver.name, release)
            for i, key in enumerate(keys):
                answers[i] = None if key is None else answer_cache.load(key)
                if answers[i] is not None and check:
                    checked.append(i)
        asked = [i for i, a in enumerate(answers) if a is None] + checked
        fresh = self._ask_lines([lines[i] for i in asked])
        for attempt in range(UNSETTLED_RETRIES + 1):
            again = [n for n, answer in enumerate(fresh) if _unsettled(answer)]
            if not again:
                break
            if attempt == UNSETTLED_RETRIES:
                raise VllmOracleError(
                    f"vLLM {self.vllm} could not build its configs in {UNSETTLED_RETRIES + 1} driver "
                    f"processes: {fresh[again[0]]['error'][:600]}"
                )
            self.close()  # vLLM remembers a failed model inspection for the life of the process
            time.sleep(1 + attempt)
            for n, answer in zip(again, self._ask_lines([lines[asked[n]] for n in again])):
                fresh[n] = answer
        for i, answer in zip(asked, fresh):
            key, cached = keys[i], answers[i]
            if cached is None:
                answers[i] = answer
                if key is not None:
                    answer_cache.store(key, answer)
            elif not answer_cache.same(cached, answer):
                raise VllmOracleError(
                    f"the cached vLLM answer {key} of {self.driver.name} differs from a live run of the "
                    f"same scenario; remove it from {answer_cache.answers_dir()} and find out why the "
                    "driver's answers are not a function of its source, vLLM's release and the scenario"
                )
        return [a for a in answers if a is not None]

    def _ask_lines(self, lines: list[str]) -> list[dict]:
        """Send scenario lines to the driver in one pipelined batch; its answers in order.

        Lines are written by a thread while the answers are read, so the driver never waits
        on a round trip and the caller can work (e.g. replay our side) in between.
        """
        if not lines:
            return []
        if self._proc is None or self._proc.poll() is not None:
            if self._proc is not None:
                raise self._fail(f"exited with code {self._proc.returncode}")
            self._start()
        assert self._proc is not None and self._lines is not None
        proc = self._proc
        write_error: list[BaseException] = []

        def feed() -> None:
            try:
                for line in lines:
                    proc.stdin.write(line + "\n")
                proc.stdin.flush()
            except (OSError, ValueError) as exc:  # the driver died; the reader reports it
                write_error.append(exc)

        writer = threading.Thread(target=feed, name="vllm-oracle-writer", daemon=True)
        writer.start()
        out: list[dict] = []
        for _ in lines:
            timeout = self.startup_timeout if self._replays == 0 else self.replay_timeout
            try:
                answer = self._lines.get(timeout=timeout)
            except queue.Empty:
                raise self._fail(f"gave no answer within {timeout:.0f} s") from None
            if answer is None:
                proc.wait()
                raise self._fail(f"exited with code {proc.returncode}")
            self._replays += 1
            try:
                out.append(json.loads(answer))
            except json.JSONDecodeError:
                raise self._fail(f"wrote a line that is not JSON: {answer[:200]!r}") from None
        writer.join()
        return out


# ---- comparison -------------------------------------------------------------


def _normalize(value):
    # As both sides look once written as JSON: tuples become lists, keys text.
    return json.loads(json.dumps(value))


def _short(value, limit: int = 160) -> str:
    text = json.dumps(value, separators=(",", ":"))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _is_scalar(value) -> bool:
    return not isinstance(value, (dict, list))


def _diff(ours, theirs, path: str, out: list[str]) -> None:
    where = path or "<root>"
    if isinstance(ours, dict) and isinstance(theirs, dict):
        keys = list(ours) + [k for k in theirs if k not in ours]
        for key in keys:
            sub = f"{path}.{key}" if path else str(key)
            if key not in theirs:
                out.append(f"{sub}: only in ours ({_short(ours[key])})")
            elif key not in ours:
                out.append(f"{sub}: missing in ours (vllm has {_short(theirs[key])})")
            else:
                _diff(ours[key], theirs[key], sub, out)
        return
    if isinstance(ours, list) and isinstance(theirs, list):
        if all(_is_scalar(v) for v in ours + theirs):
            if not _same_scalars(ours, theirs):
                first = next(
                    (i for i, (a, b) in enumerate(zip(ours, theirs)) if not _same(a, b)),
                    min(len(ours), len(theirs)),
                )
                out.append(
                    f"{where}: ours {_short(ours)} != vllm {_short(theirs)} "
                    f"(lengths {len(ours)}/{len(theirs)}, first difference at [{first}])"
                )
            return
        if len(ours) != len(theirs):
            out.append(f"{where}: length ours {len(ours)} != vllm {len(theirs)}")
        for i, (a, b) in enumerate(zip(ours, theirs)):
            _diff(a, b, f"{path}[{i}]", out)
        return
    if not _same(ours, theirs):
        out.append(f"{where}: ours {_short(ours)} != vllm {_short(theirs)}")


def _same(a, b) -> bool:
    # JSON-strict about booleans (true is not 1); numbers compare by value.
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if _is_scalar(a) and _is_scalar(b):
        return a == b
    return False


def _same_scalars(a: list, b: list) -> bool:
    return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))


def compare(ours: dict, theirs: dict) -> list[str]:
    """Differences between our replay JSON and vLLM's, one line per field path.

    Objects compare as unordered maps, lists in order (design.md section 5).
    Paths look like ``steps[3].events[0].block_hashes`` or
    ``final.cached.<hex>``. An empty list means the two agree.
    """
    mine = _without_misses(ours, theirs)
    try:
        if json.dumps(mine, sort_keys=True) == json.dumps(theirs, sort_keys=True):
            # The same JSON text (true is not 1 there either): no field differs, nothing to walk.
            # Texts read back equal, so the normalized answers are equal too; keys of mixed
            # types, or int keys that order differently from their text, go the long way.
            return []
    except TypeError:
        pass
    out: list[str] = []
    _diff(_normalize(mine), _normalize(theirs), "", out)
    return out


def at_release(scenario, oracle: VllmOracle):
    """``scenario`` under the release ``oracle`` runs, for our side of the comparison."""
    from explorer.scenario.parse_release import with_release

    return with_release(scenario, oracle.vllm)


NOT_MODELLED = "is not modelled for vLLM"


def refusal(scenario, version: str) -> str | None:
    """The one line with which the explorer refuses ``scenario`` under ``version`` as not
    modelled for that release yet (design section 15), or None when it replays it. A refused
    scenario is dropped from that release's comparison by name, and a test asserts the refusal
    (``assert_refused``), so nothing is left out silently."""
    from explorer.errors import BadInput
    from explorer.scenario.parse_release import with_release

    try:
        with_release(scenario, version)
    except BadInput as exc:
        if NOT_MODELLED in str(exc):
            return str(exc)
        raise
    return None


def modelled_cases(paths, load) -> list:
    """(release, path) for every release that models the scenario at ``path``."""
    return [(r, p) for r in RELEASES for p in paths if refusal(load(p), r) is None]


def drawn_seed(scenario) -> str:
    """The seed an xxhash scenario without one hashes from on both sides.

    vLLM draws ``os.urandom(32).hex()`` (rule 7); this is a string of the same shape derived from
    the scenario itself, so every run sends vLLM the same line and its answer is read from the
    answer cache instead of asked again. Seeds still differ from scenario to scenario."""
    return hashlib.sha256(answer_cache.scenario_line(scenario.normalized(None)).encode()).hexdigest()


def seeds_for(oracle: VllmOracle, seeds: range, at_033: int) -> range:
    """A random tier's seeds for ``oracle``'s release: all under 0.31.0, the first ``at_033``
    under 0.33.0 (the rules they share are proven on the full batch; this keeps the suite
    fast)."""
    return seeds if oracle.vllm == RELEASES[0] else seeds[:at_033]


def _without_misses(ours, theirs):
    """Our steps without the miss reasons (design section 14) when vLLM's side gives none: only
    the miss drivers (vllm_miss_driver.py, vllm_sched_miss_driver.py) classify misses from vLLM's
    state, so the other drivers' answers compare the rest. ``ours`` is left as it is (a step that
    drops a key is a copy)."""
    if not isinstance(ours, dict) or not isinstance(theirs, dict):
        return ours
    steps, their_steps = ours.get("steps"), theirs.get("steps")
    if not isinstance(steps, list) or not isinstance(their_steps, list):
        return ours
    kept = []
    for i, mine in enumerate(steps):
        other = their_steps[i] if i < len(their_steps) else None
        if isinstance(mine, dict) and isinstance(other, dict):
            mine = {k: v for k, v in mine.items() if k not in ("miss", "misses") or k in other}
        kept.append(mine)
    return {**ours, "steps": kept}
