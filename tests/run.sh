#!/usr/bin/env bash
# Set up (idempotent) and run the whole test suite against real vLLM runners, Qdrant Edge, PostgreSQL and Chromium.
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/local/setup.sh
bash deploy/local/install-postgres.sh   # the PostgreSQL job queue's tests start their own cluster
bash tests/setup-browser.sh
export RAGSERVE_TEST_BROWSER=required   # the playground's browser tests fail, not skip, without Chromium
.venv/bin/ruff check service indexer tests
exec .venv/bin/python -m pytest --durations=30 "$@"   # the slowest 30, so a CI log says where the time went
