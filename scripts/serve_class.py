"""Serve the explorer to a class: bind the machine's network address and print what to give students.

    make class                       # the machine's network address, port 8501
    make class HOST=10.0.0.5 PORT=8600

Run by ``make class``. The app itself is the same as ``make run``'s; only the address differs.
Live events and scraping a vLLM's /metrics stay whatever the teacher points them at; the Live
page's defaults are loopback addresses of the teacher's own machine.
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import os
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def pick_address(candidates: list[str]) -> str | None:
    """The first IPv4 address in ``candidates`` that another machine can reach (not loopback,
    link-local or unspecified)."""
    for c in candidates:
        try:
            ip = ipaddress.ip_address(c)
        except ValueError:
            continue
        if ip.version == 4 and not (ip.is_loopback or ip.is_link_local or ip.is_unspecified):
            return c
    return None


def network_addresses() -> list[str]:
    """This machine's addresses: its host name's, then every interface's (``hostname -I``)."""
    found: list[str] = []
    with contextlib.suppress(OSError):
        found += socket.gethostbyname_ex(socket.gethostname())[2]
    try:
        out = subprocess.run(["hostname", "-I"], capture_output=True, text=True, timeout=5, check=False)
        found += out.stdout.split()
    except (OSError, subprocess.SubprocessError):
        pass
    return found


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Serve the explorer to a class on this machine's network address.")
    p.add_argument("--host", default=os.environ.get("HOST") or "", help="address to bind (default: the machine's)")
    p.add_argument("--port", type=int, default=int(os.environ.get("PORT") or 8501), help="port (default 8501)")
    p.add_argument("--python", default=sys.executable, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    host = a.host or pick_address(network_addresses())
    if not host:
        print("serve_class: no network address found on this machine; give one with HOST=ADDRESS", file=sys.stderr)
        return 2
    if not 1 <= a.port <= 65535:
        print(f"serve_class: PORT must be 1-65535, got {a.port}", file=sys.stderr)
        return 2
    url = f"http://{host}:{a.port}"
    print(f"Serving the Prefix Cache Explorer to a class at {url}", flush=True)
    print(f"Give students this address: {url}  (the presenter screen shows it as a QR code)", flush=True)
    # Become the server (no wrapper process): Ctrl-C and a stop signal reach Streamlit itself,
    # and nothing is left running after it. From the repository root, so that Streamlit reads
    # .streamlit/config.toml (it watches no files).
    os.chdir(ROOT)
    os.execv(a.python, server_command(a.python, host, a.port))


def server_command(python: str, host: str, port: int) -> list[str]:
    """The Streamlit command line the class server becomes; run from ROOT."""
    return [
        python, "-m", "streamlit", "run", str(ROOT / "app.py"),
        "--server.address", host, "--server.port", str(port),
        "--server.headless", "true", "--browser.gatherUsageStats", "false",
    ]  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
