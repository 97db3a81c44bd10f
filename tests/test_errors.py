"""`read_user_file`: only regular files, streamed against the byte limit (issue 13)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from explorer.errors import BadInput, read_user_file


def test_reads_a_regular_file_up_to_the_limit(tmp_path: Path):
    p = tmp_path / "s.toml"
    p.write_bytes(b"x" * 100)
    assert read_user_file(p, "scenario file", 100) == b"x" * 100
    with pytest.raises(BadInput, match="100 bytes is more than the 99-byte limit for a scenario file"):
        read_user_file(p, "scenario file", 99)


def test_a_sparse_file_over_the_limit_is_refused_before_reading(tmp_path: Path):
    p = tmp_path / "big"
    with p.open("wb") as f:
        f.truncate(1 << 40)  # a terabyte of nothing: reading it would never end
    with pytest.raises(BadInput, match="1,099,511,627,776 bytes is more than the 1,024-byte limit for a trace"):
        read_user_file(p, "trace", 1024)


def test_a_file_that_reports_size_0_is_still_cut_at_the_limit():
    status = Path("/proc/self/status")  # a regular file whose stat says 0 bytes
    if not status.exists() or status.stat().st_size != 0:
        pytest.skip("needs Linux /proc")
    with pytest.raises(BadInput, match="more than the 16-byte limit"):
        read_user_file(status, "scenario file", 16)


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/null", "/dev/urandom"])
def test_devices_are_refused_unopened(device):
    with pytest.raises(BadInput, match=f"{device}: is a character device; a scenario file must be a regular file"):
        read_user_file(device, "scenario file", 1 << 20)


def test_a_fifo_without_a_writer_is_refused_without_blocking(tmp_path: Path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(BadInput, match="is a FIFO"):
        read_user_file(fifo, "scenario file", 1 << 20)


def test_a_socket_is_refused(tmp_path: Path):
    path = tmp_path / "s.sock"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(path))
        with pytest.raises(BadInput, match="is a socket"):
            read_user_file(path, "fleet file", 1 << 20)


def test_a_symlink_to_a_device_is_refused(tmp_path: Path):
    link = tmp_path / "zero.toml"
    link.symlink_to("/dev/zero")
    with pytest.raises(BadInput, match="is a character device"):
        read_user_file(link, "scenario file", 1 << 20)


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda d: d / "missing", "no such file"),
        (lambda d: d, "is a directory, not a scenario file"),
        (lambda d: str(d / "a\x00b"), "cannot read"),
    ],
)
def test_other_problems_are_one_line(tmp_path: Path, make, words):
    with pytest.raises(BadInput, match=words) as e:
        read_user_file(make(tmp_path), "scenario file", 1 << 20)
    assert "\n" not in str(e.value)


def test_an_unreadable_file_is_one_line(tmp_path: Path):
    p = tmp_path / "locked"
    p.write_text("x")
    p.chmod(0)
    if os.access(p, os.R_OK):  # root reads anything
        pytest.skip("running as root")
    with pytest.raises(BadInput, match="cannot read"):
        read_user_file(p, "scenario file", 1 << 20)
