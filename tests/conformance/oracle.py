"""Talk to vLLM 0.31.0's own classes from the project's test environment.

``VllmOracle`` starts one ``vllm_driver.py`` process inside ``.venv-vllm``
(made by ``tests/conformance/setup_vllm.sh``) on first use and reuses it for
every scenario: importing vLLM takes seconds, a replay milliseconds.
``compare`` lists field-path differences between our replay JSON and vLLM's.

This module runs in the project's virtualenv; it never imports vLLM.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import tempfile
import threading
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent.parent
DRIVER = HERE / "vllm_driver.py"
VENV_PYTHON = REPO_ROOT / ".venv-vllm" / "bin" / "python"
SETUP_HINT = "bash tests/conformance/setup_vllm.sh"


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
    ):
        self.python = Path(python) if python is not None else VENV_PYTHON
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
            raise VllmOracleError(f"vLLM oracle not installed: {shown} not found; install it with `{SETUP_HINT}`")
        env = dict(os.environ)
        env.pop("PYTHONHASHSEED", None)
        env.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
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

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            try:
                if proc.stdin:
                    proc.stdin.close()
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
        if self._proc is None or self._proc.poll() is not None:
            if self._proc is not None:
                raise self._fail(f"exited with code {self._proc.returncode}")
            self._start()
        assert self._proc is not None and self._lines is not None
        line = json.dumps(normalized, separators=(",", ":"))
        try:
            self._proc.stdin.write(line + "\n")
            self._proc.stdin.flush()
        except OSError as exc:
            raise self._fail(f"did not accept input ({exc})") from None
        timeout = self.startup_timeout if self._replays == 0 else self.replay_timeout
        try:
            answer = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise self._fail(f"gave no answer within {timeout:.0f} s") from None
        if answer is None:
            self._proc.wait()
            raise self._fail(f"exited with code {self._proc.returncode}")
        self._replays += 1
        try:
            result = json.loads(answer)
        except json.JSONDecodeError:
            raise self._fail(f"wrote a line that is not JSON: {answer[:200]!r}") from None
        if "error" in result and not allow_error:
            raise VllmReplayError(f"vLLM raised while replaying: {result['error']}")
        return result

    def replay_many(self, scenarios) -> list[dict]:
        """Replay many normalized scenarios in one pipelined batch, answers in order.

        Lines are written by a thread while the answers are read, so the driver never waits
        on a round trip and the caller can work (e.g. replay our side) in between. Each
        answer is the section-5 JSON or ``{"error": ...}`` (never raised here).
        """
        scenarios = list(scenarios)
        if not scenarios:
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
                for sc in scenarios:
                    proc.stdin.write(json.dumps(sc, separators=(",", ":")) + "\n")
                proc.stdin.flush()
            except (OSError, ValueError) as exc:  # the driver died; the reader reports it
                write_error.append(exc)

        writer = threading.Thread(target=feed, name="vllm-oracle-writer", daemon=True)
        writer.start()
        out: list[dict] = []
        for _ in scenarios:
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
    out: list[str] = []
    _diff(_normalize(ours), _normalize(theirs), "", out)
    return out
