#!/usr/bin/env bash
# The main job on one machine, offline: set up, start the runners (minilm profile) and the API on the
# embedded store, index the sample collection, answer a query, and keep serving until Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/../.."
bash deploy/local/setup.sh
exec .venv/bin/ragserve demo "$@"
