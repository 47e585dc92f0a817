#!/usr/bin/env bash
# Makes sure a Docker engine answers: when `docker info` fails and we are root, starts
# dockerd in the background (detached, so Ctrl-C on `make run` does not stop it) and waits.
set -euo pipefail

wait_seconds="${DOCKERD_WAIT_SECONDS:-60}"
log_file="${DOCKERD_LOG:-/var/log/sandhub-dockerd.log}"

if docker info >/dev/null 2>&1; then
    exit 0
fi
if [[ "$(id -u)" -ne 0 ]]; then
    echo "the Docker engine does not answer (docker info failed); start it, or run as root" >&2
    exit 1
fi
command -v dockerd >/dev/null || { echo "dockerd is not installed (apt-get install docker.io)" >&2; exit 1; }

echo "starting dockerd in the background (log: $log_file)"
setsid nohup dockerd >>"$log_file" 2>&1 </dev/null &

for ((i = 0; i < wait_seconds; i++)); do
    if docker info >/dev/null 2>&1; then
        echo "dockerd is up"
        exit 0
    fi
    sleep 1
done
echo "dockerd did not answer within ${wait_seconds}s; last lines of $log_file:" >&2
tail -n 20 "$log_file" >&2 || true
exit 1
