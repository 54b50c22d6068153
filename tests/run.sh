#!/usr/bin/env bash
# Set up (idempotent) and run the whole test suite against real vLLM runners and Qdrant local mode.
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/local/setup.sh
bash deploy/local/install-postgres.sh   # the PostgreSQL job queue's tests start their own cluster
.venv/bin/ruff check service indexer tests
exec .venv/bin/python -m pytest "$@"
