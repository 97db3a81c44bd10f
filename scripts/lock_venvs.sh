#!/usr/bin/env bash
# Rewrite the three lock files from the working virtualenvs:
#   requirements-lock.txt             from .venv            (make setup)
#   tests/conformance/vllm-0.31.0.lock from .venv-vllm       (tests/conformance/setup_vllm.sh)
#   tests/conformance/vllm-0.33.0.lock from .venv-vllm-033   (tests/conformance/setup_vllm_033.sh)
# Each install step reads its lock as pip constraints (-c), so a fresh machine gets exactly the
# versions the tests last passed with. Run after changing a requirement and re-running the tests:
#
#   bash scripts/lock_venvs.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

# lock VENV FILE WHAT: the venv's `pip freeze --all` as FILE. torch's CPU wheel reports itself as
# 2.13.0+cpu; the lock pins the public 2.13.0 (which `==2.13.0` matches, local label and all).
# Editable and direct-URL entries are dropped: they name a checkout, not a release.
lock() {
    local venv="$1" file="$2" what="$3"
    if [ ! -x "$venv/bin/python" ]; then
        echo "lock_venvs: $venv missing, $file left as it is" >&2
        return 0
    fi
    {
        echo "# Lock for $what."
        echo "# The exact versions in $venv when the tests last passed, read by every"
        echo "# install step as pip constraints (-c): it pins versions, it adds no packages."
        echo "# Regenerate from the working venvs: bash scripts/lock_venvs.sh"
        "$venv/bin/python" -m pip freeze --all --disable-pip-version-check \
            | grep -v -e '^-e ' -e ' @ ' \
            | sed -e 's/^\(torch==[0-9.]*\)+[A-Za-z0-9.]*$/\1/' \
            | LC_ALL=C sort -f
    } >"$file.tmp"
    mv "$file.tmp" "$file"
    echo "lock_venvs: $file: $(grep -vc '^#' "$file") pins from $venv"
}

lock .venv requirements-lock.txt "the app and test venv (make setup)"
lock .venv-vllm tests/conformance/vllm-0.31.0.lock \
    "the vLLM 0.31.0 oracle (tests/conformance/setup_vllm.sh)"
lock .venv-vllm-033 tests/conformance/vllm-0.33.0.lock \
    "the vLLM 0.33.0 oracle (tests/conformance/setup_vllm_033.sh)"
