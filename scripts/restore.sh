#!/usr/bin/env bash
# Restore a backup of scripts/backup.sh into a FRESH database, and prove its keys work.
#
#   scripts/restore.sh DIR [--keys FILE]
#
# The target is the configured database (DATABASE_URL: an existing, empty PostgreSQL
# database, e.g. `createdb -O sandhub sandhub`; without it the SQLite file in var/, which must
# not exist yet). The keys are DIR/keys.env, or FILE when they were stored apart. Nothing is
# restored without keys: a database whose credentials nobody can decrypt is no restore. After
# pg_restore (or the SQLite copy), every encrypted value (host credentials, stored secrets, the
# egress CA's key) is decrypted with those keys; if any fails, the script says so and exits 3.
# Then put SECRET_KEY and SANDHUB_CREDENTIAL_KEYS of the keys file in /etc/sandhub/sandhub.env,
# run `manage.py migrate` (a backup of older code is brought up to date) and start the services.
set -euo pipefail
cd "$(dirname "$0")/.."
umask 077

python=.venv/bin/python
kit=scripts/backupkit.py
usage="usage: scripts/restore.sh DIR [--keys FILE]"
dir="${1:?$usage}"
shift
keys="$dir/keys.env"
if [[ "${1:-}" == "--keys" ]]; then
    keys="${2:?$usage}"
fi
if [[ ! -f "$dir/MANIFEST" ]]; then
    echo "restore: $dir is not a backup of scripts/backup.sh (no MANIFEST)" >&2
    exit 2
fi
if [[ ! -f "$keys" ]]; then
    echo "restore: no keys ($keys is missing). The database's host credentials, stored secrets" \
        "and egress CA key are encrypted with the SANDHUB_CREDENTIAL_KEYS it was made with:" \
        "give the backup's keys.env with --keys FILE. Nothing was restored." >&2
    exit 3
fi
# The keys the backup was made with, for the checks below and nothing else.
secret_key="$(sed -n 's/^SECRET_KEY=//p' "$keys")"
credential_keys="$(sed -n 's/^SANDHUB_CREDENTIAL_KEYS=//p' "$keys")"
if [[ -z "$secret_key" || -z "$credential_keys" ]]; then
    echo "restore: $keys has no SECRET_KEY or SANDHUB_CREDENTIAL_KEYS line. Nothing was restored." >&2
    exit 3
fi
export SECRET_KEY="$secret_key" SANDHUB_CREDENTIAL_KEYS="$credential_keys"

engine="$(sed -n 's/^engine=//p' "$dir/MANIFEST")"
target="$("$python" "$kit" engine)"
if [[ "$engine" != "$target" ]]; then
    echo "restore: the backup is of $engine, the configured database is $target" >&2
    exit 2
fi
case "$engine" in
postgresql)
    tables="$(psql --dbname "$DATABASE_URL" -tAc \
        "select count(*) from pg_tables where schemaname = 'public'")"
    if [[ "$tables" != "0" ]]; then
        echo "restore: the target database has $tables tables; restore into a fresh one" >&2
        exit 2
    fi
    pg_restore --no-owner --no-privileges --exit-on-error --dbname "$DATABASE_URL" \
        "$dir/database.pgdump"
    ;;
sqlite)
    "$python" "$kit" sqlite-restore "$dir/database.sqlite3"
    ;;
esac
"$python" "$kit" verify
echo "restore: done. Set SECRET_KEY and SANDHUB_CREDENTIAL_KEYS from $keys in the platform's" \
    "environment, run manage.py migrate, then start the services."
