#!/usr/bin/env bash
# Install vLLM 0.31.0 into <repo>/.venv-vllm as the conformance oracle.
#
# Only vLLM's Python classes are used (BlockPool, KVCacheManager, Request, the
# block hasher, the KV event structs, the Scheduler built over a config.json-only
# model folder); no model runs and no GPU is needed. Building a ModelConfig
# inspects the model class, and vllm/model_executor/models/llama.py imports
# einops, so the engine-step driver needs it.
# Recipe: shared reference "vllm-oracle.md" (wheel route). Idempotent: does
# nothing when the venv already imports vllm 0.31.0, xxhash and einops; a venv
# made before einops was needed only gets einops.
#
#   bash tests/conformance/setup_vllm.sh         (from anywhere)
#   PYTHON=python3.11 bash tests/conformance/setup_vllm.sh
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VENV="${VLLM_VENV:-$ROOT/.venv-vllm}"  # VLLM_VENV=DIR: install elsewhere
# The exact versions the oracle is tested with (scripts/lock_venvs.sh); pip constraints.
LOCK="$ROOT/tests/conformance/vllm-0.31.0.lock"
export VLLM_LOGGING_LEVEL=WARNING

EINOPS=einops==0.8.2

has() {  # has MODULE...: the venv imports vllm 0.31.0 and every MODULE
    [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c \
        "import vllm, $(IFS=,; echo "$*"); assert vllm.__version__.startswith('0.31.0')" \
        >/dev/null 2>&1
}
installed() { has xxhash einops; }

if installed; then
    echo "setup_vllm: $VENV already has vllm 0.31.0 + xxhash + einops, nothing to do"
    exit 0
fi
if has xxhash; then
    echo "setup_vllm: $VENV has vllm 0.31.0 + xxhash; adding $EINOPS"
    "$VENV/bin/python" -m pip install --disable-pip-version-check --no-warn-conflicts \
        --progress-bar off -q -c "$LOCK" "$EINOPS"
    if installed; then exit 0; fi
    echo "setup_vllm: FAILED: $VENV does not import einops" >&2
    exit 1
fi

PY="${PYTHON:-}"
if [ -z "$PY" ]; then
    if command -v python3.11 >/dev/null 2>&1; then PY=python3.11; else PY=python3; fi
fi

start=$(date +%s)
if [ ! -x "$VENV/bin/python" ]; then
    echo "setup_vllm: creating $VENV with $PY"
    "$PY" -m venv "$VENV"
fi
# --no-warn-conflicts: vLLM's own CUDA-side requirements are left out on purpose.
PIP=("$VENV/bin/python" -m pip install --disable-pip-version-check
     --no-warn-conflicts --progress-bar off -q -c "$LOCK")

# Exact pin: a looser one pulls a multi-GB CUDA build of torch.
echo "setup_vllm: torch==2.13.0 (CPU)"
"${PIP[@]}" torch==2.13.0

# --no-deps on purpose: xgrammar's dependencies pull in triton (about 1 GB),
# which the cache classes never need.
echo "setup_vllm: vllm==0.31.0 + xgrammar (no deps)"
"${PIP[@]}" --no-deps vllm==0.31.0 xgrammar==0.2.7

# vLLM's import-time dependencies (pins from the 0.31.0 wheel's Requires-Dist),
# plus xxhash for the xxhash / xxhash_cbor algorithms. torch is repeated so
# that nothing here can move it.
echo "setup_vllm: import-time dependencies"
"${PIP[@]}" torch==2.13.0 numpy packaging regex psutil pyzmq urllib3 msgspec \
    pydantic cbor2 'transformers>=5.10.4,<5.18.0' aiohttp requests \
    'oss-harmony>=0.0.11' 'openai>=2.25.0' pillow pybase64 cachetools \
    cloudpickle uvloop py-cpuinfo 'prometheus_client>=0.18.0' \
    'fastapi>=0.133.0,<0.137.0' partial-json-parser 'llguidance>=1.7.0,<1.8.0' \
    apache-tvm-ffi==0.1.11 xxhash "$EINOPS"

# The CUDA extension modules are about 600 MB and never loaded by the
# classes the oracle drives; remove them.
SITE="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
find "$SITE/vllm" -name '*.so' -type f -delete

if ! installed; then
    echo "setup_vllm: FAILED: $VENV does not import vllm 0.31.0, xxhash and einops" >&2
    "$VENV/bin/python" -c "import vllm, xxhash, einops; print(vllm.__version__)" >&2 || true
    exit 1
fi
echo "setup_vllm: done in $(( $(date +%s) - start )) s"
