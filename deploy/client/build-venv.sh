#!/usr/bin/env bash
# Build the ragserve-client wheel (service/client/pyproject.toml) and install it with both adapters into a venv
# of its own: what a chat app installs, with none of the server's dependencies. Also the test tools the adapter
# tests need (tests/client_dist: pytest, pytest-asyncio, langchain-tests), and nothing else.
#
#   bash deploy/client/build-venv.sh [VENV]     # default .client-venv; then: bash deploy/client/check-venv.sh VENV
#
# Safe to run again: a venv built from the same sources (the client's files, this script) is kept as it is.
# A fresh venv, never --system-site-packages: the point is to see what the wheel alone brings in.
set -euo pipefail
cd "$(dirname "$0")/../.."

VENV=${1:-.client-venv}
# The second argument FRESH installs the current releases (to refresh constraints.txt); otherwise the pinned ones.
CONSTRAINTS=(-c deploy/client/constraints.txt)
[ "${2:-}" = FRESH ] && CONSTRAINTS=()
PYTHON=${PYTHON:-python3}
TEST_TOOLS=("pytest>=8" "pytest-asyncio>=0.23" "langchain-tests>=1.1")

# What the venv is built from: a change to any of these rebuilds the wheel and reinstalls it.
stamp=$(cat service/client/*.py service/client/pyproject.toml service/client/MANIFEST.in service/client/build_backend/*.py \
  deploy/client/constraints.txt "$0" | sha256sum | cut -d' ' -f1)
if [ -f "$VENV/.ragserve-client-stamp" ] && [ "$(cat "$VENV/.ragserve-client-stamp")" = "$stamp" ]; then
  echo "client venv: $VENV is up to date"
  exit 0
fi

wheels=$VENV/wheel   # kept: the wheel the venv holds, for a look at its contents (test_distribution.py)
# The client's build backend (service/client/build_backend) builds from a temporary copy: nothing is written into
# service/client, and a build/ left there by an older build is not read.
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
rm -rf "$wheels"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip
"$VENV/bin/python" -m pip wheel -q --disable-pip-version-check --no-deps service/client -w "$wheels"
wheel=$(ls "$wheels"/ragserve_client-*.whl)
# --force-reinstall --no-deps: the version number stays the same while the sources change
"$VENV/bin/python" -m pip install -q --disable-pip-version-check ${CONSTRAINTS[@]+"${CONSTRAINTS[@]}"} \
  "${wheel}[langchain,llamaindex]" "${TEST_TOOLS[@]}"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps "$wheel"
"$VENV/bin/python" -c "import ragserve_client.langchain, ragserve_client.llamaindex, ragserve_client as c; print('client venv: ragserve_client', c.__version__)"
echo "$stamp" > "$VENV/.ragserve-client-stamp"
