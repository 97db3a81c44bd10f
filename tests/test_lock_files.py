"""The lock files pin every requirement, and torch at the CPU build's 2.13.0.

`requirements.txt` / `requirements-dev.txt` are the human-facing ranges; `requirements-lock.txt`
pins what the tests pass with (scripts/lock_venvs.sh). A requirement the lock does not pin would
install unpinned on a fresh machine, so the lock would silently drift from the requirements.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
LOCKS = {
    "requirements-lock.txt": None,
    "tests/conformance/vllm-0.31.0.lock": "0.31.0",
    "tests/conformance/vllm-0.33.0.lock": "0.33.0",
}


def requirement_names(path: Path) -> set[str]:
    """The package names a requirements file names, following `-r` includes."""
    names: set[str] = set()
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith(("-r ", "--requirement ")):
            names |= requirement_names(path.parent / line.split(maxsplit=1)[1])
            continue
        names.add(canonicalize_name(Requirement(line).name))
    return names


def lock_pins(path: Path) -> dict[str, str]:
    """name -> exact version for each `name==version` line; any other line fails."""
    pins: dict[str, str] = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = re.fullmatch(r"([A-Za-z0-9._-]+)==([A-Za-z0-9.+!-]+)", line)
        assert match, f"{path.name}: not an exact pin: {line!r}"
        name = canonicalize_name(match.group(1))
        assert name not in pins, f"{path.name}: {name} pinned twice"
        pins[name] = match.group(2)
    return pins


@pytest.mark.parametrize("requirements", ["requirements.txt", "requirements-dev.txt"])
def test_lock_pins_every_requirement(requirements: str) -> None:
    names = requirement_names(ROOT / requirements)
    assert "torch" in names and "streamlit" in names  # the parser read the file
    unpinned = sorted(names - lock_pins(ROOT / "requirements-lock.txt").keys())
    assert not unpinned, f"{requirements} names packages requirements-lock.txt does not pin: {unpinned}"


def test_lock_pins_satisfy_requirements() -> None:
    pins = lock_pins(ROOT / "requirements-lock.txt")
    for raw in (ROOT / "requirements.txt").read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if line and not line.startswith("-"):
            req = Requirement(line)
            pinned = pins[canonicalize_name(req.name)]
            assert req.specifier.contains(pinned, prereleases=True), f"{req} vs lock {pinned}"


@pytest.mark.parametrize("lock", sorted(LOCKS))
def test_lock_pins_torch_cpu_build(lock: str) -> None:
    pins = lock_pins(ROOT / lock)
    assert pins.get("torch") == "2.13.0", f"{lock} pins torch {pins.get('torch')}, not 2.13.0"
    vllm = LOCKS[lock]
    assert pins.get("vllm") == vllm, f"{lock} pins vllm {pins.get('vllm')}, expected {vllm}"
