#!/usr/bin/env bash
# The static checks, then every test tier. pytest's exit code 5 (no test collected) counts as a failure.
#
# Tests run in PYTEST_JOBS parallel workers (pytest-xdist; default 3, 0 = one process), one test
# file per worker at a time (--dist loadfile: a module's fixtures are built once; the browser files
# each start their own `streamlit run` on a port the OS picks), the longest tiers handed out first
# (tests/conftest.py; --no-loadscope-reorder keeps that order). vLLM's
# answers are read from the answer cache where the same driver, release and scenario were asked
# before (tests/conformance/answer_cache.py); `make test-live` asks vLLM for every one.
# pytest's cache is on, so `bash scripts/run_tests.sh --lf` reruns the last failures.
set -uo pipefail
cd "$(dirname "$0")/.."
mkdir -p test-output
# Every test process (three workers, each app server, each command started as a process, each Ray
# worker) imports the explorer and the tests; with bytecode kept it compiles each module once per
# run instead of once per process, and pytest keeps its rewritten test modules (a worker's
# collection: 12.6 s without, 5.7 s with, on this suite's machine). The compiled files go under
# test-output/, not beside the sources; an environment that turned bytecode off is overridden for the run.
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX="$PWD/test-output/pycache"
echo "static checks: ruff check, ruff format --check, mypy"
.venv/bin/ruff check explorer tests vllm_drivers scripts app.py || exit 1
.venv/bin/ruff format --check explorer tests vllm_drivers scripts app.py || exit 1
.venv/bin/mypy || exit 1
jobs="${PYTEST_JOBS:-3}"
parallel=()
if [ "$jobs" != 0 ]; then
  parallel=(-n "$jobs" --dist loadfile --no-loadscope-reorder)
fi
.venv/bin/python -m pytest -q --durations=25 "${parallel[@]}" "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
  echo "no tests were collected: failing" >&2
  exit 1
fi
exit "$rc"
