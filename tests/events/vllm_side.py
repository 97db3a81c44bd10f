"""Client for ``vllm_helper.py``: vLLM's own KV event code in a ``.venv-vllm`` subprocess.

A missing ``.venv-vllm`` is a failure, never a skip (install it with
``bash tests/conformance/setup_vllm.sh``).
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
HELPER = REPO_ROOT / "vllm_drivers" / "vllm_helper.py"
VENV_PYTHON = REPO_ROOT / ".venv-vllm" / "bin" / "python"


class VllmHelperError(RuntimeError):
    pass


class VllmHelper:
    def __init__(self, startup_timeout: float = 300.0, command_timeout: float = 60.0):
        if not VENV_PYTHON.exists():
            raise VllmHelperError(
                "vLLM 0.31.0 is not installed: .venv-vllm/bin/python not found; "
                "install it with `bash tests/conformance/setup_vllm.sh`"
            )
        env = dict(os.environ, VLLM_LOGGING_LEVEL="WARNING")
        env.pop("PYTHONHASHSEED", None)
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 (lives as long as the child process)
        self._proc = subprocess.Popen(
            [str(VENV_PYTHON), str(HELPER)],
            cwd=str(REPO_ROOT),
            env=env,
            text=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            bufsize=1,
        )
        self._lines: queue.Queue = queue.Queue()
        self.command_timeout = command_timeout

        def pump():
            for line in self._proc.stdout:
                self._lines.put(line)
            self._lines.put(None)

        threading.Thread(target=pump, daemon=True, name="vllm-helper-reader").start()
        ready = self._answer(startup_timeout)
        if not ready.get("ready"):
            raise self._fail(f"did not start: {ready}")

    def _fail(self, what: str) -> VllmHelperError:
        self._stderr.seek(0)
        tail = self._stderr.read().decode("utf-8", "replace")[-3000:]
        self.close()
        return VllmHelperError(f"vLLM helper {what}; stderr ends with:\n{tail}")

    def _answer(self, timeout: float) -> dict:
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise self._fail(f"gave no answer within {timeout:.0f} s") from None
        if line is None:
            raise self._fail("exited")
        return json.loads(line)

    def call(self, cmd: str, **kw) -> dict:
        """Send one command (keyword arguments are its fields); its answer, or raise."""
        if self._proc is None:
            raise VllmHelperError(f"{cmd}: the vLLM helper is not running")
        self._proc.stdin.write(json.dumps({"cmd": cmd, **kw}) + "\n")
        self._proc.stdin.flush()
        answer = self._answer(self.command_timeout)
        if "error" in answer:
            raise VllmHelperError(f"{cmd}: {answer['error']}")
        return answer

    def close(self) -> None:
        proc, self._proc = getattr(self, "_proc", None), None
        if proc is not None:
            try:
                proc.stdin.close()
                proc.wait(timeout=20)
            except (OSError, subprocess.TimeoutExpired):
                proc.kill()
                proc.wait()


def wire_json(value):
    """Our event values in the helper's JSON form: bytes as "hex:...", tuples as lists."""
    if isinstance(value, bytes):
        return "hex:" + value.hex()
    if isinstance(value, (list, tuple)):
        return [wire_json(v) for v in value]
    return value


def all_fields(event) -> dict:
    """Every field of one of our event objects, in the helper's JSON form."""
    from dataclasses import fields

    d = {"type": type(event).__name__}
    for f in fields(event):
        if f.name == "lookahead_token_ids" and event.lookahead_token_ids is None:
            continue  # vLLM 0.33's field, left out at its default (0.31.0's events have none)
        d[f.name] = wire_json(getattr(event, f.name))
    return d
