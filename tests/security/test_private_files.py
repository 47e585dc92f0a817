"""The platform's files are readable by no other Unix user of the machine (issue 21).

A red-team run read `var/sandhub.sqlite3` (0644 in a 0755 `var/`) as a sandbox user on the
same machine, took a team owner's session key from `django_session` and used it. Here another
Unix user tries the same against a platform started for real (`manage.py` in a process of its
own, in a directory everyone may enter), and an older install's loose modes are corrected at
start, said once in the log.
"""

from __future__ import annotations

import os
import pwd
import shutil
import sqlite3
import stat
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from hosts.backends import get_backend
from hosts.backends.base import LABEL_INSTANCE
from hosts.backends.docker import DockerBackend

ROOT = Path(__file__).resolve().parents[2]
OTHER_USER = "sandhub-other"
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="making another Unix user needs root")


@pytest.fixture(scope="module")
def other_user() -> Iterator[str]:
    """An ordinary account of the machine, as a sandbox user on it would be."""
    made = False
    try:
        pwd.getpwnam(OTHER_USER)
    except KeyError:
        subprocess.run(
            ["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", OTHER_USER],
            check=True,
        )
        made = True
    yield OTHER_USER
    if made:
        subprocess.run(["userdel", OTHER_USER], check=False)


def read_as(user: str, path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["runuser", "-u", user, "--", "cat", str(path)], capture_output=True, text=True
    )


def assert_unreadable(user: str, path: Path) -> None:
    assert path.exists(), path
    attempt = read_as(user, path)
    assert attempt.returncode != 0 and "Permission denied" in attempt.stderr, (path, attempt)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def open_dir(tmp_path: Path) -> Path:
    """A directory every user may enter, as a checkout under /srv or /opt is."""
    tmp_path.chmod(0o755)
    return tmp_path


def platform_env(var_dir: Path, **extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"DATABASE_URL", "SECRET_KEY", "SANDHUB_CREDENTIAL_KEY", "SANDHUB_DISK_DIR"}
        and not k.startswith("SANDHUB_CREDENTIAL_KEYS")
    }
    return {**env, "SANDHUB_VAR_DIR": str(var_dir), "PYTHONPATH": str(ROOT), **extra}


def shell_umask() -> None:
    """Started as from a shell with the usual umask, which would leave new files readable."""
    os.umask(0o022)


def manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=shell_umask,
    )
    assert done.returncode == 0, done.stderr
    return done


def test_a_fresh_start_keeps_var_and_the_database_from_other_users(open_dir, other_user):
    var = open_dir / "var"
    manage(platform_env(var), "migrate", "--noinput", "-v", "0")

    assert mode(var) == 0o700
    for name in ("sandhub.sqlite3", "secret_key", "credential_key"):
        assert mode(var / name) == 0o600, name
    # The red team's way in: list var/, read the database, and so a session key.
    listing = subprocess.run(
        ["runuser", "-u", other_user, "--", "ls", str(var)], capture_output=True, text=True
    )
    assert listing.returncode != 0 and "Permission denied" in listing.stderr
    for name in ("sandhub.sqlite3", "secret_key", "credential_key"):
        assert_unreadable(other_user, var / name)


def test_a_database_outside_var_and_its_wal_and_shm_are_the_owners_alone(open_dir, other_user):
    shared = open_dir / "db"
    shared.mkdir(mode=0o755)
    database = shared / "sandhub.sqlite3"
    env = platform_env(open_dir / "var", DATABASE_URL=f"sqlite:///{database}")
    manage(env, "migrate", "--noinput", "-v", "0")
    # While a platform process has the database open, its -wal and -shm exist.
    holder = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "manage.py"),
            "shell",
            "-v",
            "0",
            "-c",
            "from django.contrib.sessions.models import Session; Session.objects.count(); "
            "import sys; print('open', flush=True); sys.stdin.read()",
        ],
        env=env,
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=shell_umask,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "open\n"
        for suffix in ("", "-wal", "-shm"):
            path = Path(f"{database}{suffix}")
            assert mode(path) == 0o600, path
            assert_unreadable(other_user, path)
    finally:
        holder.communicate("", timeout=60)
    assert holder.returncode == 0


def test_loose_modes_of_an_older_install_are_corrected_at_start_and_said_once(open_dir):
    var = open_dir / "var"
    manage(platform_env(var), "migrate", "--noinput", "-v", "0")
    disks = var / "disks"
    disks.mkdir()
    (disks / "sandhub-sb_x.img").write_bytes(b"\0" * 1024)
    (disks / "sandhub-sb_x.json").write_text("{}")
    loose = [var, disks]
    loose += [var / n for n in ("sandhub.sqlite3", "secret_key", "credential_key")]
    loose += [disks / "sandhub-sb_x.img", disks / "sandhub-sb_x.json"]
    for path in loose:
        path.chmod(0o755 if path.is_dir() else 0o644)

    first = manage(platform_env(var), "check")
    second = manage(platform_env(var), "check")

    for path in loose:
        assert mode(path) == (0o700 if path.is_dir() else 0o600), path
        assert f"{path} {0o755 if path.is_dir() else 0o644:04o} -> " in first.stderr
    assert "readable by other users; corrected" in first.stderr
    assert "corrected" not in second.stderr
    # The corrected database still works for its owner.
    with sqlite3.connect(var / "sandhub.sqlite3") as connection:
        assert connection.execute("select count(*) from django_migrations").fetchone()[0] > 0


@pytest.mark.docker
@pytest.mark.django_db
def test_a_sandbox_disk_image_and_its_metadata_are_readable_by_no_other_user(
    real_docker, open_dir, other_user, settings
):
    settings.SANDHUB_DISK_DIR = open_dir / "disks"
    backend = get_backend(real_docker)
    assert isinstance(backend, DockerBackend)
    name = f"sandhub-sb_private{uuid.uuid4().hex[:6]}"
    labels = {LABEL_INSTANCE: f"pytest-{uuid.uuid4().hex[:8]}", "org.sandhub.sandbox": name}
    backend.containers.disks.create(name, 64, labels)
    try:
        disk_dir = Path(settings.SANDHUB_DISK_DIR)
        assert mode(disk_dir) == 0o700
        for path in (disk_dir / f"{name}.img", disk_dir / f"{name}.json"):
            assert mode(path) == 0o600, path
            # Even with the directory opened up, the files themselves refuse.
            disk_dir.chmod(0o755)
            assert_unreadable(other_user, path)
            disk_dir.chmod(0o700)
    finally:
        backend.containers.disks.remove(name)
    assert not list(Path(settings.SANDHUB_DISK_DIR).glob(f"{name}*"))
    shutil.rmtree(settings.SANDHUB_DISK_DIR, ignore_errors=True)
