#!/usr/bin/env bash
# The static checks, then every test tier. pytest's exit code 5 (no test collected) counts as a failure.
set -uo pipefail
cd "$(dirname "$0")/.."
mkdir -p test-output
echo "static checks: ruff check, ruff format --check, mypy"
.venv/bin/ruff check explorer tests scripts app.py || exit 1
.venv/bin/ruff format --check explorer tests scripts app.py || exit 1
.venv/bin/mypy || exit 1
.venv/bin/python -m pytest -q -p no:cacheprovider "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
  echo "no tests were collected: failing" >&2
  exit 1
fi
exit "$rc"
