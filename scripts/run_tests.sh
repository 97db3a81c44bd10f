#!/usr/bin/env bash
# Every test tier. pytest's exit code 5 (no test collected) counts as a failure.
set -uo pipefail
cd "$(dirname "$0")/.."
mkdir -p test-output
.venv/bin/python -m pytest -q -p no:cacheprovider "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
  echo "no tests were collected: failing" >&2
  exit 1
fi
exit "$rc"
