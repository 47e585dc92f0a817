"""scripts/backup.sh and scripts/restore.sh, on SQLite and on PostgreSQL (when the run's
DATABASE_URL is one: CI's PostgreSQL pass). A database with a team, a host whose credential is
encrypted and an API key is backed up while nothing else is configured, restored into a fresh
database by a process that has no keys but the backup's, and there the credential still
decrypts and the API key still authenticates. Without the keys nothing is restored, and the
message says what is missing; with other keys the restore says the values cannot be read.

Every step is a subprocess with its own settings (a fresh SANDHUB_VAR_DIR, so no key comes from
this checkout's var/), as an operator runs the scripts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
from cryptography.fernet import Fernet

ROOT = Path(__file__).resolve().parents[2]
SECRET = "the-ssh-password-of-host-h1"
RUN_URL = os.environ.get("DATABASE_URL", "")
ON_POSTGRES = RUN_URL.startswith(("postgres://", "postgresql://"))
SETTINGS = ("DATABASE_URL", "SECRET_KEY", "SANDHUB_CREDENTIAL_KEY", "SANDHUB_CREDENTIAL_KEYS")

MAKE_DATA = """
import sys; import django; django.setup()
from django.contrib.auth import get_user_model
from hosts.models import Credential, Host
from tenants import apikeys
from tenants.models import Membership, Role, Team
team = Team.objects.create(slug="backup", name="Backup")
user = get_user_model().objects.create(username="operator")
Membership.objects.create(user=user, team=team, role=Role.OWNER)
credential = Credential(name="h1-login", kind="password", username="sandhub")
credential.set_secret(sys.argv[1])
credential.save()
Host.objects.create(name="h1", kind="ssh", endpoint="10.0.0.1:22", credential=credential, team=team)
from hosts import crypto
from sandboxes.models import EgressSecret
EgressSecret.objects.create(team=team, name="API_TOKEN", hosts=["api.example.com"],
                            value_encrypted=crypto.encrypt("a-stored-token"))
print(apikeys.create_key(user, team, name="kept", scopes="read").plaintext)
"""

CHECK = """
import json, sys; import django; django.setup()
from hosts.models import Host
from tenants import apikeys
key = apikeys.authenticate(sys.argv[1])
print(json.dumps({"secret": Host.objects.get(name="h1").credential.get_secret(),
                  "key_user": key.user.username if key else None}))
"""


def environment(var_dir: Path, **settings: str) -> dict[str, str]:
    """This process's environment without any platform setting, plus `settings`."""
    env = {name: value for name, value in os.environ.items() if name not in SETTINGS}
    return {**env, "SANDHUB_VAR_DIR": str(var_dir), **settings}


def run(argv: list[str], env: dict[str, str], check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    if check:
        assert done.returncode == 0, f"{argv}: {done.stdout}\n{done.stderr}"
    return done


def python(code: str, env: dict[str, str], *args: str) -> str:
    return run([sys.executable, "-c", code, *args], env).stdout.strip()


@pytest.fixture
def databases(request, tmp_path) -> Iterator[tuple[str, str, str]]:
    """(source URL, fresh target URL, another fresh target URL) on the engine asked for."""
    if request.param == "sqlite":
        yield tuple(f"sqlite:///{tmp_path / name}.sqlite3" for name in ("src", "dst", "dst2"))
        return
    if not ON_POSTGRES:
        pytest.skip("PostgreSQL: run with DATABASE_URL=postgres://... (CI's PostgreSQL pass)")
    import psycopg

    base = urlsplit(RUN_URL)
    stem = base.path.lstrip("/") + "_backup"
    names = [f"{stem}_src", f"{stem}_dst", f"{stem}_dst2"]
    with psycopg.connect(RUN_URL, autocommit=True) as admin:
        for name in names:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield tuple(urlunsplit(base._replace(path=f"/{name}")) for name in names)
    finally:
        with psycopg.connect(RUN_URL, autocommit=True) as admin:
            for name in names:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


ENGINES = ["sqlite", pytest.param("postgresql", marks=pytest.mark.django_db)]


@pytest.mark.parametrize("databases", ENGINES, indirect=True)
def test_a_restored_database_keeps_its_credentials_and_api_keys(databases, tmp_path):
    source, target, other = databases
    keys = {
        "SECRET_KEY": "backup-test-" + "x" * 40,
        "SANDHUB_CREDENTIAL_KEYS": Fernet.generate_key().decode(),
    }
    made = environment(tmp_path / "var-src", DATABASE_URL=source, **keys)
    run([sys.executable, "manage.py", "migrate", "--no-input"], made)
    api_key = python(MAKE_DATA, made, SECRET).splitlines()[-1]
    backup = tmp_path / "backup"
    run(["scripts/backup.sh", str(backup)], made)
    kept = (backup / "keys.env").read_text()
    assert f"SANDHUB_CREDENTIAL_KEYS={keys['SANDHUB_CREDENTIAL_KEYS']}" in kept
    assert oct((backup / "keys.env").stat().st_mode & 0o777) == "0o600"

    # The restoring machine knows nothing but the backup.
    restored = run(
        ["scripts/restore.sh", str(backup)], environment(tmp_path / "var-dst", DATABASE_URL=target)
    )
    assert "all 2 encrypted values decrypt" in restored.stdout, restored.stdout
    serving = environment(tmp_path / "var-dst", DATABASE_URL=target, **keys)
    found = json.loads(python(CHECK, serving, api_key))
    assert found == {"secret": SECRET, "key_user": "operator"}

    # Without the keys: refused before anything is written, saying what is missing.
    (backup / "keys.env").rename(tmp_path / "keys-elsewhere.env")
    fresh = environment(tmp_path / "var-other", DATABASE_URL=other)
    refused = run(["scripts/restore.sh", str(backup)], fresh, check=False)
    assert refused.returncode == 3
    assert "no keys" in refused.stderr and "SANDHUB_CREDENTIAL_KEYS" in refused.stderr
    assert "Nothing was restored" in refused.stderr
    if databases[2].startswith("sqlite:"):
        assert (
            not Path(urlsplit(other).path).exists()
            or Path(urlsplit(other).path).stat().st_size == 0
        )

    # With other keys: restored, but the script says the values cannot be read, and fails.
    wrong = tmp_path / "wrong.env"
    wrong.write_text(
        f"SECRET_KEY=other\nSANDHUB_CREDENTIAL_KEYS={Fernet.generate_key().decode()}\n"
    )
    failed = run(["scripts/restore.sh", str(backup), "--keys", str(wrong)], fresh, check=False)
    assert failed.returncode == 3
    assert "cannot be decrypted with the configured SANDHUB_CREDENTIAL_KEYS" in failed.stderr
