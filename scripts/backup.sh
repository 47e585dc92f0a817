#!/usr/bin/env bash
# Back up what a Sandhub deployment cannot be rebuilt without: the database and the keys.
#
#   scripts/backup.sh [DIR]     (default var/backups/<UTC time>; DIR must not exist)
#
# with the platform's settings in the environment (`set -a; . /etc/sandhub/sandhub.env;
# set +a`, or none for `make run`'s SQLite in var/). DIR gets, all 0600 in a 0700 directory:
#   database.pgdump    PostgreSQL: pg_dump's custom format of DATABASE_URL (one consistent
#                      snapshot while the platform runs; pg_restore reads it)
#   database.sqlite3   SQLite: a consistent copy taken with SQLite's backup API
#   keys.env           SECRET_KEY and SANDHUB_CREDENTIAL_KEYS as the platform uses them: host
#                      credentials, stored secrets and the egress CA's key are encrypted with
#                      them. Store it apart from the database dump.
#   MANIFEST           what was backed up, when
# Restore with scripts/restore.sh DIR (docs/deploy.md).
set -euo pipefail
cd "$(dirname "$0")/.."
umask 077

python=.venv/bin/python
kit=scripts/backupkit.py
out="${1:-var/backups/$(date -u +%Y%m%dT%H%M%SZ)}"
if [[ -e "$out" ]]; then
    echo "backup: $out exists; give a new directory" >&2
    exit 2
fi
mkdir -p -m 700 "$out"

engine="$("$python" "$kit" engine)"
case "$engine" in
postgresql)
    if [[ -z "${DATABASE_URL:-}" ]]; then
        echo "backup: PostgreSQL needs DATABASE_URL in the environment" >&2
        exit 2
    fi
    pg_dump --format=custom --no-owner --no-privileges --file "$out/database.pgdump" \
        --dbname "$DATABASE_URL"
    dump=database.pgdump
    ;;
sqlite)
    "$python" "$kit" sqlite-backup "$out/database.sqlite3"
    dump=database.sqlite3
    ;;
*)
    echo "backup: unknown database engine '$engine'" >&2
    exit 2
    ;;
esac
"$python" "$kit" keys "$out/keys.env"
{
    echo "engine=$engine"
    echo "database=$dump"
    echo "made=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "commit=$(git rev-parse HEAD 2>/dev/null || echo unknown)"
} >"$out/MANIFEST"
echo "backup: $engine database and keys in $out (move keys.env to a separate safe place)"
