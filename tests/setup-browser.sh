#!/usr/bin/env bash
# Headless Chromium for the playground's browser tests (tests/service/api/test_playground.py): Debian's
# `chromium` package, driven by Playwright from PyPI (the `test` extra) through its executable_path.
# Playwright's own browser download (`playwright install`) is never used. Safe to run again: apt-get
# runs only when no chromium is on PATH.
set -euo pipefail
if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" -eq 0 ]; then
  SUDO=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  SUDO=(sudo)
else
  echo "ragserve tests: Chromium is missing and apt-get needs root; run: sudo apt-get install -y chromium" >&2
  exit 1
fi
echo "ragserve tests: installing Debian's chromium for the playground tests"
"${SUDO[@]}" apt-get update -q
DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -q chromium
