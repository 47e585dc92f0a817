"""The Python half of scripts/backup.sh and scripts/restore.sh (run by them with the
platform's settings; not meant to be run by hand).

    backupkit.py engine                 postgresql or sqlite, of the configured database
    backupkit.py keys FILE              SECRET_KEY and SANDHUB_CREDENTIAL_KEYS as the platform
                                        uses them (from the environment or var/), 0600
    backupkit.py sqlite-backup FILE     a consistent copy of the SQLite database (the backup
                                        API: safe while the platform writes, WAL included)
    backupkit.py sqlite-restore FILE    the copy into the configured SQLite path (must not
                                        exist yet)
    backupkit.py verify                 every encrypted value in the database decrypts with the
                                        configured keys (exit 3 and a message saying which
                                        keys are needed if not)
"""

from __future__ import annotations

import os
import sqlite3
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KEYS_NOT_MATCHING = 3


def _setup() -> None:
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "platform_site.settings")
    import django

    django.setup()


def _database() -> dict:
    from django.db import connection

    return connection.settings_dict


def engine() -> str:
    return "postgresql" if "postgresql" in _database()["ENGINE"] else "sqlite"


def write_keys(path: Path) -> None:
    from django.conf import settings

    lines = [
        "# Sandhub's keys for this backup's database: without them its host credentials,",
        "# stored secrets and the egress CA's key cannot be read, and sessions are lost.",
        "# Keep this file apart from the database dump (anyone with both reads the secrets).",
        f"SECRET_KEY={settings.SECRET_KEY}",
        f"SANDHUB_CREDENTIAL_KEYS={','.join(settings.CREDENTIAL_KEYS)}",
    ]
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write("\n".join(lines) + "\n")


def _copy_sqlite(source_path: Path, target_path: Path) -> None:
    """SQLite's online backup API, page by page (consistent even while the platform writes)."""
    source = sqlite3.connect(str(source_path))
    target = sqlite3.connect(str(target_path))
    try:
        with target:
            source.backup(target)
    finally:
        target.close()
        source.close()
    target_path.chmod(0o600)


def sqlite_backup(path: Path) -> None:
    _copy_sqlite(Path(str(_database()["NAME"])), path)


def sqlite_restore(path: Path) -> None:
    destination = Path(str(_database()["NAME"]))
    if destination.exists() and destination.stat().st_size > 0:
        raise SystemExit(f"restore: {destination} exists; restore into a fresh database")
    _copy_sqlite(path, destination)


def _encrypted_values() -> list[tuple[str, str]]:
    """(what, token) for every encrypted value the database holds."""
    from django.apps import apps

    found: list[tuple[str, str]] = []
    fields = {
        ("hosts", "Credential"): ("secret_encrypted", "passphrase_encrypted"),
        ("sandboxes", "EgressSecret"): ("value_encrypted",),
        ("sandboxes", "EgressAuthority"): ("key_encrypted",),
    }
    for (app, name), columns in fields.items():
        model = apps.get_model(app, name)
        for row in model.objects.values_list("pk", *columns):
            pk, tokens = row[0], row[1:]
            found += [(f"{name} {pk}", token) for token in tokens if token]
    return found


def verify() -> int:
    from hosts import crypto

    values = _encrypted_values()
    failed = []
    for what, token in values:
        try:
            crypto.decrypt(token)
        except crypto.CredentialKeyError:
            failed.append(what)
    if failed:
        print(
            f"restore: {len(failed)} of {len(values)} encrypted values ({', '.join(failed[:5])}"
            f"{', ...' if len(failed) > 5 else ''}) cannot be decrypted with the configured "
            "SANDHUB_CREDENTIAL_KEYS: give the keys this database was made with (the backup's "
            "keys.env, --keys FILE)",
            file=sys.stderr,
        )
        return KEYS_NOT_MATCHING
    print(f"restore: all {len(values)} encrypted values decrypt with the configured keys")
    return 0


def main(argv: list[str]) -> int:
    _setup()
    command, *rest = argv or ["help"]
    if command == "engine":
        print(engine())
    elif command == "keys" and rest:
        write_keys(Path(rest[0]))
    elif command == "sqlite-backup" and rest:
        sqlite_backup(Path(rest[0]))
    elif command == "sqlite-restore" and rest:
        sqlite_restore(Path(rest[0]))
    elif command == "verify":
        return verify()
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
