#!/usr/bin/env bash
# The web process alone: uvicorn serving platform_site.asgi (Django pages and admin, the REST
# API, the MCP endpoint, previews) in the foreground. scripts/run.sh starts it beside the
# worker; the tests start it as it is (tests/platform/test_request_head_limit.py).
set -euo pipefail
cd "$(dirname "$0")/.."

host="${SANDHUB_BIND_HOST:-127.0.0.1}"
port="${SANDHUB_BIND_PORT:-8000}"
# One uvicorn worker process per core by default: one process serves one core at most (the
# GIL), and the MCP endpoint is stateless, so any worker can answer any request.
workers="${SANDHUB_WEB_WORKERS:-$(nproc)}"
if ! [[ "$workers" =~ ^[1-9][0-9]*$ ]]; then
    echo "SANDHUB_WEB_WORKERS must be a positive integer, not '$workers'" >&2
    exit 2
fi

# Prometheus' multiprocess mode (docs/metrics.md): each worker writes its counters to files in
# this directory and /metrics sums them. One given (by run.sh, a unit) is its giver's to
# empty at start; otherwise this script takes a fresh one of its own, named by its port: two
# web processes of one checkout (tests, a unit per port) must not empty each other's.
if [[ -z "${PROMETHEUS_MULTIPROC_DIR:-}" ]]; then
    export PROMETHEUS_MULTIPROC_DIR="$PWD/var/prometheus/web-$port"
    rm -rf "$PROMETHEUS_MULTIPROC_DIR"
fi
mkdir -p "$PROMETHEUS_MULTIPROC_DIR"

# JSON logs (SANDHUB_LOG_FORMAT=json): Django's LOGGING covers the workers; uvicorn's own
# supervisor process, which never loads Django, takes the same format from this file.
if [[ "${SANDHUB_LOG_FORMAT:-text}" == json ]]; then
    export UVICORN_LOG_CONFIG="${UVICORN_LOG_CONFIG:-platform_site/uvicorn_log_json.json}"
fi

echo "web on http://$host:$port/ ($workers workers)"
# --http: uvicorn's httptools protocol with a limit on each request's head
# (platform_site/httpserver.py): past SANDHUB_MAX_REQUEST_HEAD_BYTES the client gets 431 before
# the parser holds the rest.
exec .venv/bin/uvicorn platform_site.asgi:application --host "$host" --port "$port" \
    --workers "$workers" --http platform_site.httpserver:HeadLimitedHttpToolsProtocol
