#!/usr/bin/env bash
# Set up (idempotent) and run the whole test suite against real vLLM runners and Qdrant local mode.
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/local/setup.sh
bash tests/setup-browser.sh
export RAGSERVE_TEST_BROWSER=required   # the playground's browser tests fail, not skip, without Chromium
.venv/bin/ruff check service indexer tests
exec .venv/bin/python -m pytest "$@"
