"""`make run` and `make class` start a Streamlit that watches no files.

The setting lives in .streamlit/config.toml, which Streamlit reads from the directory it starts
in. The browser tests pass ``--server.fileWatcherType none`` on their own command line, so they
would not notice the setting being dropped or overridden: here the commands that `make run` and
`make class` really run are asked, through ``streamlit config show`` with the same options,
environment and directory, what file watcher the server gets and where that value came from.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_spec = importlib.util.spec_from_file_location("serve_class", ROOT / "scripts" / "serve_class.py")
assert _spec is not None and _spec.loader is not None
serve_class = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(serve_class)


def test_the_config_file_sets_no_file_watcher():
    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert config["server"]["fileWatcherType"] == "none"


def _make_line(target: str, needle: str) -> tuple[dict[str, str], list[str]]:
    """What ``make TARGET`` runs (``make -n``: printed, not run): the recipe line holding
    ``needle``, split into its environment assignments and its command."""
    out = subprocess.run(["make", "-n", target], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    line = next(ln for ln in out.splitlines() if needle in ln)
    words = shlex.split(line)
    env = {}
    while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]):
        k, _, v = words.pop(0).partition("=")
        env[k] = v
    return env, words


def _watcher(cmd: list[str], env: dict[str, str]) -> tuple[str, str]:
    """``streamlit config show`` for the server command ``cmd`` (its `run APP` swapped for
    `config show`), run from ROOT: the file watcher type and where Streamlit says it was set."""
    i = cmd.index("run")
    show = [*cmd[:i], "config", "show", *cmd[i + 2 :]]
    clean = {k: v for k, v in os.environ.items() if not k.startswith("STREAMLIT_")}
    out = subprocess.run(
        show, cwd=ROOT, env={**clean, **env}, capture_output=True, text=True, check=True, timeout=120
    ).stdout
    m = re.search(r"# The value below was set in (.+)\n(?:#.*\n)*fileWatcherType = \"(\w+)\"", out)
    assert m is not None, out[-2000:]
    return m.group(2), m.group(1)


def test_make_run_starts_streamlit_from_the_root_reading_the_config():
    env, cmd = _make_line("run", "streamlit run")
    assert Path(cmd[0]).name == "streamlit" and cmd[1:3] == ["run", "app.py"]
    assert not any("fileWatcherType" in w or "global.developmentMode" in w for w in cmd)
    watcher, source = _watcher([str(ROOT / cmd[0]), *cmd[1:]], env)
    assert (watcher, Path(source)) == ("none", ROOT / ".streamlit" / "config.toml")


def test_make_class_starts_streamlit_from_the_root_reading_the_config():
    env, cmd = _make_line("class", "serve_class.py")
    assert cmd[-1] == "scripts/serve_class.py"
    server = serve_class.server_command(sys.executable, "127.0.0.2", 8612)
    assert serve_class.ROOT == ROOT  # main() changes to it before it becomes the server
    watcher, source = _watcher(server, env)
    assert (watcher, Path(source)) == ("none", ROOT / ".streamlit" / "config.toml")


def test_an_override_on_the_command_line_is_seen():
    server = serve_class.server_command(sys.executable, "127.0.0.2", 8612)
    watcher, source = _watcher([*server, "--server.fileWatcherType", "auto"], {})
    assert watcher == "auto" and "command-line" in source
