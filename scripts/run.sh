#!/usr/bin/env bash
# Runs the web server (uvicorn) and the worker (django-q2 qcluster) together in the
# foreground. Ctrl-C, TERM, or either process ending stops both.
set -euo pipefail
cd "$(dirname "$0")/.."

bin=.venv/bin
host="${SANDHUB_BIND_HOST:-127.0.0.1}"
port="${SANDHUB_BIND_PORT:-8000}"
# One uvicorn worker process per core by default: one process serves one core at most (the
# GIL), and the MCP endpoint is stateless, so any worker can answer any request.
workers="${SANDHUB_WEB_WORKERS:-$(nproc)}"
if ! [[ "$workers" =~ ^[1-9][0-9]*$ ]]; then
    echo "SANDHUB_WEB_WORKERS must be a positive integer, not '$workers'" >&2
    exit 2
fi
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

"$bin/uvicorn" platform_site.asgi:application --host "$host" --port "$port" --workers "$workers" &
pids+=($!)
"$bin/python" manage.py qcluster &
pids+=($!)
echo "web on http://$host:$port/ ($workers workers, pid ${pids[0]}), worker pid ${pids[1]}; Ctrl-C stops both"

# Whichever ends first takes the other down with it: half a platform is worse than none.
status=0
wait -n "${pids[@]}" || status=$?
echo "a process exited (status $status); stopping the other" >&2
exit "$status"
