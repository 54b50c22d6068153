# Sourced by the install scripts: run a noisy step (apt-get) with its output in a log file, so a newcomer sees
# one line per step; on failure the log's last lines go to stderr and the step's exit status is kept.
RAGSERVE_SETUP_LOG=${RAGSERVE_SETUP_LOG:-${TMPDIR:-/tmp}/ragserve-setup.log}

quietly() {  # quietly "what it does" command [args...]
  local what=$1
  shift
  printf 'ragserve setup: %s ... ' "$what"
  if "$@" >>"$RAGSERVE_SETUP_LOG" 2>&1; then
    echo ok
  else
    local status=$?
    echo "failed (exit $status): the end of $RAGSERVE_SETUP_LOG follows"
    tail -n 20 "$RAGSERVE_SETUP_LOG" >&2
    return "$status"
  fi
}
