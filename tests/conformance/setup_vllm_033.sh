#!/usr/bin/env bash
# Install vLLM 0.33.0 into <repo>/.venv-vllm-033, the second conformance oracle
# beside 0.31.0's .venv-vllm (design section 15).
#
# Same route as setup_vllm.sh (only vLLM's Python classes run, no model, no GPU),
# with 0.33.0's pins. torch stays at the 2.13.0 CPU build: 0.33.0 pins 2.14.0,
# which has no CPU wheel here, and the prefix-cache, manager and scheduler code
# never calls into torch. pip's warning about that pin is expected.
# Idempotent: does nothing when the venv already imports vllm 0.33.0, xxhash
# and einops.
#
#   bash tests/conformance/setup_vllm_033.sh     (from anywhere)
#   PYTHON=python3.11 bash tests/conformance/setup_vllm_033.sh
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VENV="${VLLM_033_VENV:-$ROOT/.venv-vllm-033}"  # VLLM_033_VENV=DIR: install elsewhere
# The exact versions the oracle is tested with (scripts/lock_venvs.sh); pip constraints.
LOCK="$ROOT/tests/conformance/vllm-0.33.0.lock"
export VLLM_LOGGING_LEVEL=WARNING

installed() {
    [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c \
        "import vllm, xxhash, einops; assert vllm.__version__.startswith('0.33.0')" \
        >/dev/null 2>&1
}

if installed; then
    echo "setup_vllm_033: $VENV already has vllm 0.33.0 + xxhash + einops, nothing to do"
    exit 0
fi

PY="${PYTHON:-}"
if [ -z "$PY" ]; then
    if command -v python3.11 >/dev/null 2>&1; then PY=python3.11; else PY=python3; fi
fi

start=$(date +%s)
if [ ! -x "$VENV/bin/python" ]; then
    echo "setup_vllm_033: creating $VENV with $PY"
    "$PY" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip install --disable-pip-version-check
     --no-warn-conflicts --progress-bar off -q -c "$LOCK")

echo "setup_vllm_033: torch==2.13.0 (CPU)"
"${PIP[@]}" torch==2.13.0

# --no-deps: vLLM's CUDA-side requirements (and triton through xgrammar) are
# never loaded by the cache classes.
echo "setup_vllm_033: vllm==0.33.0 + xgrammar (no deps)"
"${PIP[@]}" --no-deps vllm==0.33.0 xgrammar==0.2.8

# vLLM's import-time dependencies with 0.33.0's pins; torch repeated so that
# nothing here can move it.
echo "setup_vllm_033: import-time dependencies"
"${PIP[@]}" torch==2.13.0 numpy packaging regex psutil pyzmq urllib3 msgspec \
    'pydantic>=2.12.0' cbor2 'transformers>=5.16.1,<5.21.0' 'aiohttp>=3.14.4' \
    'requests>=2.33.0' 'oss-harmony>=0.0.11' 'openai>=2.25.0' 'pillow>=13.0.0' \
    pybase64 cachetools cloudpickle uvloop py-cpuinfo 'prometheus_client>=0.18.0' \
    'fastapi>=0.133.0' partial-json-parser 'llguidance>=1.7.0' \
    apache-tvm-ffi xxhash einops==0.8.2

# The CUDA extension modules are never loaded by the oracle's classes.
SITE="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
find "$SITE/vllm" -name '*.so' -type f -delete

if ! installed; then
    echo "setup_vllm_033: FAILED: $VENV does not import vllm 0.33.0, xxhash and einops" >&2
    "$VENV/bin/python" -c "import vllm, xxhash, einops; print(vllm.__version__)" >&2 || true
    exit 1
fi
echo "setup_vllm_033: done in $(( $(date +%s) - start )) s"
