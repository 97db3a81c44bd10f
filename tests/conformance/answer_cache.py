"""vLLM's answers kept on disk, so a scenario asked again is not replayed through vLLM again.

An answer is what a driver (vllm_driver.py, vllm_sched_driver.py, ...) running inside a vLLM
virtualenv wrote for one scenario line. It is a function of three things only, and its key is
the SHA-256 of all three:

- the driver's source: the driver file and every module beside it that it imports, followed
  transitively (vllm_groups.py, vllm_offloading.py, ...); editing any of them changes the key;
- the vLLM release of the virtualenv it runs in (read from the installed distribution's
  metadata, without importing vLLM), so a second release has keys of its own;
- the scenario line exactly as sent (canonical JSON): a new or edited scenario is a new key.

A changed driver or scenario therefore never finds an old answer: it is asked live and its answer
stored under the new key. Where the vLLM release cannot be read, nothing is cached.

Environment:
    EXPLORER_ORACLE=live          ask vLLM every time (answers are still stored); `make test-live`
    EXPLORER_ORACLE_CHECK=0.1     this fraction of the (driver, release) pairs, drawn once per
                                  test run (all its parallel workers draw alike), also ask vLLM
                                  live for every answer they read from the cache, and fail when
                                  the two differ (CI does; default 0)
    EXPLORER_ORACLE_ANSWERS=DIR   where answers lie (default: the explorer's cache folder,
                                  ``oracle-answers/`` in it; see explorer/tokenizer_cache.py)
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import json
import os
import random
import re
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path

from explorer.tokenizer_cache import cache_dir

MODE_ENV = "EXPLORER_ORACLE"
CHECK_ENV = "EXPLORER_ORACLE_CHECK"
DIR_ENV = "EXPLORER_ORACLE_ANSWERS"

_IMPORT = re.compile(r"^\s*(?:from\s+([A-Za-z_]\w*)\s+import|import\s+([A-Za-z_]\w*))", re.MULTILINE)


def live() -> bool:
    """True when every answer is to be asked of vLLM (no cached answer is read)."""
    return os.environ.get(MODE_ENV, "").strip().lower() == "live"


def check_fraction() -> float:
    """The fraction of cached answers also asked live and compared (0 when unset)."""
    raw = os.environ.get(CHECK_ENV, "").strip()
    try:
        value = float(raw) if raw else 0.0
    except ValueError:
        raise ValueError(f"{CHECK_ENV}={raw!r} is not a number in [0, 1]") from None
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{CHECK_ENV}={raw!r} is not a number in [0, 1]")
    return value


_DRAWS: dict[tuple[str, str], float] = {}  # (driver, release) -> this run's draw in [0, 1)

# pytest-xdist gives every worker of a run the same id: the workers draw the same pairs, so a
# run checks a tenth of the pairs however many workers it has (drawn per process, three workers
# had checked nearly three tenths). A run without workers draws for itself.
_RUN = os.environ.get("PYTEST_XDIST_TESTRUNUID") or uuid.uuid4().hex


def checks_driver(driver_name: str, release: str | None) -> bool:
    """Whether this test run asks vLLM again, through this driver and release, for every
    answer it reads from the cache and compares the two (never where the release is unknown:
    nothing is cached then).

    The sample is drawn by (driver, release), once per run, not by answer: starting a driver
    imports vLLM (seconds of CPU), a cached answer asked again costs milliseconds, so checking
    a tenth of the drivers wholly costs a tenth of the starts that checking a tenth of every
    driver's answers did, for as many answers checked. Over runs every driver is drawn."""
    if release is None:
        return False
    fraction = check_fraction()
    key = (driver_name, release)
    if key not in _DRAWS:
        _DRAWS[key] = random.Random(f"{_RUN}\0{driver_name}\0{release}").random()
    return fraction >= 1.0 or _DRAWS[key] < fraction


def answers_dir() -> Path:
    raw = os.environ.get(DIR_ENV)
    return Path(raw) if raw else cache_dir() / "oracle-answers"


@functools.lru_cache(maxsize=16)
def driver_sources(driver: Path) -> tuple[tuple[str, bytes], ...]:
    """(name, source) of the driver and of every module beside it that it imports, transitively,
    in a fixed order. A module is 'beside it' when NAME.py lies in the driver's folder."""
    folder = driver.parent
    seen: dict[str, bytes] = {}
    todo = [driver.name]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        source = (folder / name).read_bytes()
        seen[name] = source
        for m in _IMPORT.finditer(source.decode("utf-8")):
            module = (m.group(1) or m.group(2)) + ".py"
            if (folder / module).is_file():
                todo.append(module)
    return tuple(sorted(seen.items()))


@functools.lru_cache(maxsize=8)
def vllm_release(python: Path) -> str | None:
    """The vLLM release installed in the virtualenv of `python` (``.../bin/python``), from its
    distribution metadata; None when it cannot be found."""
    venv = python.parent.parent
    found = sorted(venv.glob("lib/python3*/site-packages/vllm-*.dist-info/METADATA"))
    if len(found) != 1:
        return None
    for line in found[0].read_text(encoding="utf-8", errors="replace").splitlines():
        if line.startswith("Version:"):
            return line.split(":", 1)[1].strip() or None
        if not line.strip():
            break
    return None


def scenario_line(scenario: dict) -> str:
    """The line the oracle sends for a scenario; the key hashes exactly this text."""
    return json.dumps(scenario, separators=(",", ":"))


def answer_key(driver: Path, release: str, line: str) -> str:
    h = hashlib.sha256()
    for name, source in driver_sources(driver):
        h.update(b"file\0" + name.encode() + b"\0" + hashlib.sha256(source).digest())
    h.update(b"vllm\0" + release.encode() + b"\0")
    h.update(b"scenario\0" + line.encode("utf-8"))
    return h.hexdigest()


def _path(key: str) -> Path:
    return answers_dir() / key[:2] / f"{key}.json.gz"


def load(key: str) -> dict | None:
    """The stored answer of `key`, or None (absent, or a torn file: then asked again)."""
    try:
        with gzip.open(_path(key), "rt", encoding="utf-8") as f:
            value = json.load(f)
    except (OSError, EOFError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def store(key: str, answer: dict) -> None:
    """Write an answer whole or not at all (a temporary file renamed into place), so parallel
    test processes never read half a file. A folder that cannot be written only costs time."""
    path = _path(key)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".answer-", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as f:
                f.write(json.dumps(answer, separators=(",", ":")).encode("utf-8"))
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError:
        pass


def same(a: dict, b: dict) -> bool:
    """Two answers are the same when their JSON texts are (key order aside)."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def answer(driver: Path, python: Path, line: str, ask: Callable[[], dict]) -> dict:
    """For a one-shot vLLM script (not a line-per-scenario driver): the kept answer of ``driver``
    run by ``python`` on ``line`` (what the run depends on, besides the sources), else ``ask()``'s,
    kept. As for the drivers, EXPLORER_ORACLE=live asks every time, and where the script and
    release are in the sample (EXPLORER_ORACLE_CHECK) a kept answer is asked again and must be equal."""
    release = vllm_release(python)
    key = None if release is None else answer_key(driver, release, line)
    kept = None if key is None or live() else load(key)
    if kept is not None and not checks_driver(driver.name, release):
        return kept
    fresh = ask()
    if kept is not None and not same(kept, fresh):
        raise AssertionError(
            f"the kept vLLM answer {key} of {driver.name} differs from a live run; remove it from "
            f"{answers_dir()} and find out why the answer is not a function of its sources, vLLM's "
            "release and its input"
        )
    if key is not None:
        store(key, fresh)
    return fresh
