#!/usr/bin/env bash
# Install PostgreSQL from Debian's packages (idempotent): the server binaries the tests start a throwaway
# cluster with (tests/support/postgres.py runs initdb + pg_ctl from /usr/lib/postgresql/*/bin on a temp dir
# and a free loopback port, as `nobody` when run as root). Nothing is started here.
set -euo pipefail
if compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null; then
  echo "ragserve setup: PostgreSQL already installed ($(ls /usr/lib/postgresql | sort -n | tail -1))"
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "ragserve setup: PostgreSQL is missing; as root run: apt-get update && apt-get install -y postgresql" >&2
  exit 1
fi
source "$(dirname "$0")/quietly.sh"
echo "ragserve setup: installing PostgreSQL, full log in $RAGSERVE_SETUP_LOG"
export DEBIAN_FRONTEND=noninteractive
quietly "apt-get update" apt-get update -q
quietly "apt-get install" apt-get install -y -q postgresql
