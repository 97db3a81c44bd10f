"""The one error type that user input can raise.

Everything a user can type, upload or pass on the command line is checked, and a problem is
reported as a `BadInput` whose message names what was wrong (file, step, field). The CLI prints
that message on one line and exits 2; the UI shows it in an error element. Anything else that
escapes is a bug in the explorer, not in the input.
"""

from explorer.core.errors import BadInput

__all__ = ["BadInput", "read_user_file"]


def read_user_file(path, what: str, max_bytes: int | None = None) -> bytes:
    """The bytes of a file the user named, or a BadInput saying why not (missing, a directory,
    unreadable, larger than ``max_bytes``). ``what`` names the kind of file in messages."""
    from pathlib import Path

    p = Path(path)
    try:
        if max_bytes is not None:
            size = p.stat().st_size
            if size > max_bytes:
                raise BadInput(f"{p}: {size:,} bytes is more than the {max_bytes:,}-byte limit for a {what}")
        return p.read_bytes()
    except FileNotFoundError:
        raise BadInput(f"{p}: no such file") from None
    except IsADirectoryError:
        raise BadInput(f"{p}: is a directory, not a {what}") from None
    except OSError as e:
        raise BadInput(f"{p}: cannot read ({e.strerror or e})") from None
