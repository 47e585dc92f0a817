#!/usr/bin/env bash
# Runs the web server (uvicorn), the worker (django-q2 qcluster) and the egress proxy (the only
# way out of a sandbox whose network is on) together in the foreground. Ctrl-C, TERM, or any
# of them ending stops all three.
set -euo pipefail
cd "$(dirname "$0")/.."

bin=.venv/bin
pids=()

# shellcheck disable=SC2317  # reached through the traps below
stop() {
    trap - INT TERM EXIT
    if ((${#pids[@]})); then
        kill -TERM "${pids[@]}" 2>/dev/null || true
        wait "${pids[@]}" 2>/dev/null || true
    fi
}
trap 'stop; exit 130' INT
trap 'stop; exit 143' TERM
trap stop EXIT

# The node's metrics directory, shared by the web workers and the worker (docs/metrics.md),
# emptied at start: counts of an earlier run would add to this one's.
export PROMETHEUS_MULTIPROC_DIR="${PROMETHEUS_MULTIPROC_DIR:-$PWD/var/prometheus/node}"
mkdir -p "$PROMETHEUS_MULTIPROC_DIR"
find "$PROMETHEUS_MULTIPROC_DIR" -maxdepth 1 -name '*.db' -delete

scripts/web.sh &  # uvicorn (it execs), with the bind address and workers it reads
pids+=($!)
"$bin/python" manage.py qcluster &
pids+=($!)
"$bin/python" manage.py egressproxy &
pids+=($!)
echo "web pid ${pids[0]}, worker pid ${pids[1]}, egress proxy pid ${pids[2]}; Ctrl-C stops all three"

# Whichever ends first takes the others down with it: half a platform is worse than none.
status=0
wait -n "${pids[@]}" || status=$?
echo "a process exited (status $status); stopping the others" >&2
exit "$status"
