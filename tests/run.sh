#!/usr/bin/env bash
# Set up (idempotent) and run the test suite's gate against real vLLM runners, Qdrant Edge, PostgreSQL and
# Chromium: claims that hold however busy the machine is (what CI runs). `bash tests/run.sh --soak` runs the
# soak tier instead: the claims about speed and load (tests/support/tiers.py). Other arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
setup_started=$SECONDS
bash deploy/local/setup.sh
bash deploy/client/build-venv.sh        # ragserve-client's own venv: tests/service/client/test_distribution.py runs the adapter tests there
bash deploy/local/install-postgres.sh   # the PostgreSQL job queue's tests start their own cluster
bash tests/setup-browser.sh
export RAGSERVE_TEST_BROWSER=required   # the playground's browser tests fail, not skip, without Chromium
echo "tests/run.sh: setup took $((SECONDS - setup_started)) s"
.venv/bin/ruff check service indexer tests
exec .venv/bin/python -m pytest --durations=30 "$@"   # the slowest 30, so a CI log says where the time went
