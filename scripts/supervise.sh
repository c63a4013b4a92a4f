#!/usr/bin/env bash
# Runs commands side by side and stops them together: supervise.sh CMD ARGS... [-- CMD ARGS...]...
# (`make run`'s web server and worker, through scripts/serve.sh).
#
# Ctrl-C (SIGINT) or SIGTERM stops every child (SIGTERM, then waits for it) and exits 0: ending
# the run is what the person asked for, so `make run` ends on "[run] stopped", not on
# "make: *** [Makefile:5: run] Error 130". When a child ends by itself (a crash, a port in use),
# the others are stopped too and its exit status is returned, so make reports the failure.
#
# The children run in the background of this non-interactive shell, which starts them with
# SIGINT ignored (bash does so without job control): a Ctrl-C reaches them as the SIGTERM below,
# once, rather than as two signals in a race.
set -uo pipefail

pids=()
command=()
stop_children() {
  trap '' INT TERM  # a second Ctrl-C while the children stop changes nothing
  kill -TERM "${pids[@]}" 2>/dev/null || true
  wait "${pids[@]}" 2>/dev/null || true
}
stopped_by_request() {
  echo "[run] stopping the web server and the worker"
  stop_children
  echo "[run] stopped"
  exit 0
}
# Set before the first child starts: a Ctrl-C at any moment stops what has started.
trap stopped_by_request INT TERM

start() {
  "$@" &
  pids+=($!)
}
for arg in "$@"; do
  if [ "$arg" = "--" ]; then
    if [ ${#command[@]} -gt 0 ]; then start "${command[@]}"; fi
    command=()
  else
    command+=("$arg")
  fi
done
if [ ${#command[@]} -gt 0 ]; then start "${command[@]}"; fi
if [ ${#pids[@]} -eq 0 ]; then
  echo "usage: supervise.sh CMD ARGS... [-- CMD ARGS...]..." >&2
  exit 2
fi

# A trapped signal makes `wait` return at once (status > 128) and runs the trap, which exits.
wait -n "${pids[@]}"
status=$?
echo "[run] a process ended (exit status $status): stopping the others" >&2
stop_children
exit "$status"
