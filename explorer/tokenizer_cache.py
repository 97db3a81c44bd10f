"""Where the built text tokenizer is kept between processes: one tokenizer.json per model file.

explorer/tokens.py builds SmolLM2-135M's tokenizer from the GGUF file's vocabulary and merges;
that takes seconds in every process that tokenizes text (the CLI, each test process, each app
start). The built tokenizer is saved once as Hugging Face's tokenizer.json and loaded from then on.

The file's name is a hash of what the tokenizer is made from: the model file (its path, size and
modification time), the source of the module that builds it, and the `tokenizers` release. A
changed model file, a changed builder or another `tokenizers` gets another name, so a stale file
is never read; it is simply built again.

The folder is ``$EXPLORER_CACHE_DIR``, else ``$XDG_CACHE_HOME/prefix-cache-explorer``, else
``~/.cache/prefix-cache-explorer``. Where it cannot be written the tokenizer is built each time,
as before: the cache only saves time, it never changes an answer.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

CACHE_ENV = "EXPLORER_CACHE_DIR"


def cache_dir() -> Path:
    """The folder of the explorer's caches (not created here)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "prefix-cache-explorer"


def path_for(model_path: str, builder_source: bytes) -> Path | None:
    """The tokenizer.json of the model file at `model_path` as built by `builder_source`;
    None when the model file cannot be read (then nothing is cached)."""
    try:
        st = os.stat(model_path)
        import tokenizers
    except (OSError, ImportError):
        return None
    key = hashlib.sha256()
    for part in (os.path.abspath(model_path), str(st.st_size), str(st.st_mtime_ns), tokenizers.__version__):
        key.update(part.encode("utf-8") + b"\0")
    key.update(builder_source)
    return cache_dir() / f"tokenizer-{key.hexdigest()[:24]}.json"


def save(path: Path, text: str) -> None:
    """Write `text` to `path` whole or not at all: a temporary file renamed into place, so a
    process reading at the same time sees the old file, the new one, or none. Errors are
    swallowed: a cache that cannot be written is only slower."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tokenizer-", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError:
        pass
