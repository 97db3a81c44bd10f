#!/usr/bin/env bash
# What the test tiers need beyond the Python venv: Debian's chromium for the browser tests
# (Playwright drives it; no browser is downloaded), Debian's prometheus for the metrics test
# (it scrapes `explorer metrics --serve`), Debian's zbar-tools for the class test, vLLM 0.31.0 in
# its own venv as the conformance oracle, and vLLM 0.33.0 in a second venv beside it (design
# section 15).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v chromium >/dev/null 2>&1; then
  echo "installing Debian's chromium for the browser tests"
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
fi
if ! command -v prometheus >/dev/null 2>&1; then
  echo "installing Debian's prometheus for the metrics test"
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends prometheus >/dev/null
fi
if ! command -v zbarimg >/dev/null 2>&1; then
  echo "installing Debian's zbar-tools for the class test (it reads the QR code the page draws)"
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends zbar-tools >/dev/null
fi
bash tests/conformance/setup_vllm.sh
bash tests/conformance/setup_vllm_033.sh
