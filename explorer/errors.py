"""The one error type that user input can raise.

Everything a user can type, upload or pass on the command line is checked, and a problem is
reported as a `BadInput` whose message names what was wrong (file, step, field). The CLI prints
that message on one line and exits 2; the UI shows it in an error element. Anything else that
escapes is a bug in the explorer, not in the input.
"""

from pathlib import Path

from explorer.core.errors import BadInput

__all__ = ["BadInput", "read_user_file"]

_CHUNK = 1 << 20


def read_user_file(path: str | Path, what: str, max_bytes: int) -> bytes:
    """The bytes of a file the user named, or a BadInput saying why not (missing, a directory,
    not a regular file, unreadable, larger than ``max_bytes``). ``what`` names the kind of file
    in messages.

    Only a regular file is read: a FIFO, a device (``/dev/zero``) or a socket is refused before
    it is opened, so a FIFO with no writer cannot block. The file is read in chunks and refused
    as soon as it passes ``max_bytes``, whatever its reported size (``/proc`` files say 0).
    """
    import os
    import stat
    from pathlib import Path

    p = Path(path)
    try:
        st = os.stat(p)
        if stat.S_ISDIR(st.st_mode):
            raise BadInput(f"{p}: is a directory, not a {what}")
        if not stat.S_ISREG(st.st_mode):
            raise BadInput(f"{p}: is {_kind(st.st_mode)}; a {what} must be a regular file")
        if st.st_size > max_bytes:
            raise BadInput(f"{p}: {st.st_size:,} bytes is more than the {max_bytes:,}-byte limit for a {what}")
        # O_NONBLOCK: should the path have become a FIFO since the stat, opening it cannot hang.
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
        with os.fdopen(fd, "rb", buffering=0) as f:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise BadInput(f"{p}: not a regular file; a {what} must be a regular file")
            chunks, total = [], 0
            while True:
                chunk = f.read(min(_CHUNK, max_bytes + 1 - total))
                if not chunk:
                    break
                chunks.append(chunk)
                total += len(chunk)
                if total > max_bytes:
                    raise BadInput(f"{p}: more than the {max_bytes:,}-byte limit for a {what}")
            return b"".join(chunks)
    except BadInput:
        raise
    except FileNotFoundError:
        raise BadInput(f"{p}: no such file") from None
    except IsADirectoryError:
        raise BadInput(f"{p}: is a directory, not a {what}") from None
    except (OSError, ValueError) as e:  # ValueError: a path with a NUL byte
        raise BadInput(f"{p}: cannot read ({getattr(e, 'strerror', None) or e})") from None


def _kind(mode: int) -> str:
    import stat

    for test, name in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file"  # pragma: no cover (every other kind is named above)
