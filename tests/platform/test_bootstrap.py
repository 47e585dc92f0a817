"""Management commands: `bootstrap` (idempotent first run) and `rotate_credentials`."""

from __future__ import annotations

import re
from io import StringIO

import pytest
from cryptography.fernet import Fernet
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.test import override_settings

from hosts.crypto import CredentialKeyError
from hosts.models import Credential, Host, Image
from tenants.models import AuditLog, Channel, Membership, Role, Team

pytestmark = pytest.mark.django_db

PASSWORD = "a-long-and-uncommon-passphrase-81"


@pytest.fixture(autouse=True)
def no_password_in_environment(monkeypatch):
    monkeypatch.delenv("SANDHUB_ADMIN_PASSWORD", raising=False)


def bootstrap(*args: str) -> str:
    out = StringIO()
    call_command("bootstrap", *args, stdout=out)
    return out.getvalue()


# --- bootstrap -------------------------------------------------------------------------------


@override_settings(SANDHUB_DOCKER_URL="unix:///run/test-docker.sock")
def test_bootstrap_twice_creates_everything_once(settings) -> None:
    first = bootstrap("--admin-password", PASSWORD)
    user = get_user_model().objects.get(username="admin")
    password_hash = user.password

    second = bootstrap("--admin-password", "a-different-passphrase-that-is-ignored")

    assert get_user_model().objects.count() == 1
    user.refresh_from_db()
    assert user.is_superuser and user.is_staff
    assert user.password == password_hash
    assert user.check_password(PASSWORD)

    team = Team.objects.get()
    assert team.slug == "default"
    assert Membership.objects.get().role == Role.OWNER
    assert Membership.objects.get().user == user

    host = Host.objects.get()
    assert (host.kind, host.endpoint) == (Host.Kind.DOCKER, "unix:///run/test-docker.sock")

    image = Image.objects.get()
    assert (image.name, image.reference, image.is_default) == (
        "python",
        settings.SANDHUB_SANDBOX_IMAGE,
        True,
    )

    # Team users log in at the root, admins at /admin/: both are printed.
    assert "team pages at http://127.0.0.1:8000/," in first
    assert "admin at http://127.0.0.1:8000/admin/." in first
    assert "exists; password unchanged" in second
    assert "\ncreated " not in "\n" + second
    # One system audit row for the run that created things, none for the no-op run.
    row = AuditLog.objects.get(action="platform.bootstrap")
    assert row.channel == Channel.SYSTEM


def test_the_owner_joins_the_team_through_the_audited_service() -> None:
    bootstrap("--admin-password", PASSWORD)
    bootstrap("--admin-password", PASSWORD)
    row = AuditLog.objects.get(action="membership.add")  # once: the second run adds nobody
    assert (row.channel, row.actor, row.outcome) == (Channel.SYSTEM, None, "ok")
    assert (row.team.slug, row.target_id, row.details["role"]) == ("default", "admin", "owner")
    assert row.details["via"] == "manage.py bootstrap"


def test_an_existing_membership_keeps_its_role() -> None:
    admin = get_user_model().objects.create_superuser("admin", password=PASSWORD)
    team = Team.objects.create(slug="default", name="Default team")
    Membership.objects.create(user=admin, team=team, role=Role.ADMIN)
    bootstrap()
    assert Membership.objects.get().role == Role.ADMIN
    assert not AuditLog.objects.filter(action="membership.add").exists()


def test_generated_password_is_printed_once() -> None:
    first = bootstrap()
    match = re.search(r"Generated password: (\S+)", first)
    assert match, first
    password = match.group(1)
    assert get_user_model().objects.get(username="admin").check_password(password)

    second = bootstrap()
    assert password not in second
    assert "Generated password" not in second


def test_password_from_environment(monkeypatch) -> None:
    monkeypatch.setenv("SANDHUB_ADMIN_PASSWORD", PASSWORD)
    out = bootstrap("--admin-username", "root", "--team-slug", "ops")
    assert PASSWORD not in out
    assert get_user_model().objects.get(username="root").check_password(PASSWORD)
    assert Team.objects.get().slug == "ops"


def test_weak_password_is_refused_and_nothing_is_created() -> None:
    with pytest.raises(CommandError, match="admin password rejected"):
        bootstrap("--admin-password", "password")
    assert not get_user_model().objects.exists()
    assert not Team.objects.exists()
    assert not Host.objects.exists()


def test_docker_url_option_and_existing_engine_host() -> None:
    Host.objects.create(name="renamed-by-admin", kind="docker", endpoint="tcp://10.0.0.5:2376")
    bootstrap("--admin-password", PASSWORD, "--docker-url", "tcp://10.0.0.5:2376")
    # The engine was already registered under another name: no second host for it.
    assert Host.objects.get().name == "renamed-by-admin"


def test_existing_default_image_is_kept_default() -> None:
    Image.objects.create(name="node", reference="example/node:1", is_default=True)
    bootstrap("--admin-password", PASSWORD)
    assert Image.objects.get(is_default=True).name == "node"
    assert Image.objects.get(name="python").is_default is False


# --- credential keys -------------------------------------------------------------------------


def _credential(name: str, secret: str) -> Credential:
    credential = Credential(name=name, kind=Credential.Kind.PASSWORD)
    credential.set_secret(secret)
    credential.save()
    return credential


def _column(credential: Credential) -> str:
    """The stored ciphertext as read from the database, not from the Python object."""
    return Credential.objects.filter(pk=credential.pk).values_list("secret_encrypted", flat=True)[0]


def test_credential_decrypts_after_key_rotation() -> None:
    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    secret = "s3cret-that-must-not-leak"
    with override_settings(CREDENTIAL_KEYS=[old]):
        credential = _credential("ssh-box", secret)
    before = _column(credential)
    assert secret not in before

    with override_settings(CREDENTIAL_KEYS=[new, old]):
        out = StringIO()
        call_command("rotate_credentials", stdout=out)
    assert "re-encrypted 1 credential" in out.getvalue()

    after = _column(credential)
    assert after != before
    assert secret not in after
    with override_settings(CREDENTIAL_KEYS=[new]):
        assert Credential.objects.get(pk=credential.pk).get_secret() == secret
    with override_settings(CREDENTIAL_KEYS=[old]), pytest.raises(CredentialKeyError):
        Credential.objects.get(pk=credential.pk).get_secret()


def test_rotation_reports_credentials_no_key_opens() -> None:
    lost, old, new = (Fernet.generate_key().decode() for _ in range(3))
    with override_settings(CREDENTIAL_KEYS=[lost]):
        _credential("orphan", "x")
    with override_settings(CREDENTIAL_KEYS=[old]):
        good = _credential("fine", "y")
    with override_settings(CREDENTIAL_KEYS=[new, old]), pytest.raises(CommandError, match="orphan"):
        call_command("rotate_credentials", stdout=StringIO())
    # The other credential was still moved to the new key.
    with override_settings(CREDENTIAL_KEYS=[new]):
        assert Credential.objects.get(pk=good.pk).get_secret() == "y"
