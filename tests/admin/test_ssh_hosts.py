"""Admin for SSH hosts: the host key's state in the host list, the confirmation page that
shows each fingerprint and pins only what it showed, and the passphrase of a private key
stored encrypted, never shown. Fixtures: tests/admin/conftest.py."""

from __future__ import annotations

import pytest
from django.test import Client

from hosts.models import Credential, Host
from sandboxes import services
from sandboxes.contract.errors import PermissionDenied
from tenants.models import AuditLog
from tests.admin.helpers import action, url

SEEN = "SHA256:" + "B" * 43
OTHER = "SHA256:" + "C" * 43
KEY_TEXT = "-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n-----END OPENSSH PRIVATE KEY-----\n"


def ssh_host(**fields) -> Host:
    return Host.objects.create(name="gpu-box", kind="ssh", endpoint="127.0.0.1:22", **fields)


def test_the_host_list_says_whether_a_key_is_pinned(staff_client: Client) -> None:
    host = ssh_host()
    assert b"not fetched: not used" in staff_client.get(url(Host, "changelist")).content
    Host.objects.filter(pk=host.pk).update(host_key_seen=SEEN)
    assert b"not confirmed: not used" in staff_client.get(url(Host, "changelist")).content
    Host.objects.filter(pk=host.pk).update(host_key_pinned=SEEN)
    assert b"pinned" in staff_client.get(url(Host, "changelist")).content
    Host.objects.filter(pk=host.pk).update(host_key_seen=OTHER)
    assert b"CHANGED: refused" in staff_client.get(url(Host, "changelist")).content


def test_confirming_shows_the_fingerprint_and_pins_only_what_was_shown(
    staff_client: Client,
) -> None:
    host = ssh_host(host_key_seen=SEEN, host_key_type="ssh-ed25519")
    page = action(staff_client, Host, "confirm_host_keys", [host.pk])
    assert page.status_code == 200 and SEEN.encode() in page.content
    assert not Host.objects.get(pk=host.pk).host_key_pinned  # nothing pinned by looking
    # The host presented another key after the page was shown: the shown one is refused.
    Host.objects.filter(pk=host.pk).update(host_key_seen=OTHER)
    action(
        staff_client,
        Host,
        "confirm_host_keys",
        [host.pk],
        confirm="yes",
        **{f"fingerprint-{host.pk}": SEEN},
    )
    assert not Host.objects.get(pk=host.pk).host_key_pinned
    action(
        staff_client,
        Host,
        "confirm_host_keys",
        [host.pk],
        confirm="yes",
        **{f"fingerprint-{host.pk}": OTHER},
    )
    assert Host.objects.get(pk=host.pk).host_key_pinned == OTHER
    rows = AuditLog.objects.filter(action="host.key.confirm").order_by("pk")
    assert [r.outcome for r in rows] == ["conflict", "ok"]


def test_a_private_keys_passphrase_is_stored_encrypted_and_never_shown(
    staff_client: Client,
) -> None:
    response = staff_client.post(
        url(Credential, "add"),
        {
            "name": "key",
            "kind": Credential.Kind.PRIVATE_KEY,
            "username": "sandhub",
            "secret": KEY_TEXT,
            "passphrase": "correct horse",
        },
    )
    assert response.status_code == 302, response.content
    credential = Credential.objects.get(name="key")
    assert credential.get_passphrase() == "correct horse"
    assert "correct horse" not in credential.passphrase_encrypted
    page = staff_client.get(url(credential, "change", credential.pk))
    assert b"correct horse" not in page.content
    assert credential.passphrase_encrypted.encode() not in page.content


def test_only_platform_admins_fetch_or_confirm_host_keys(as_alice) -> None:
    host = ssh_host(host_key_seen=SEEN)
    for call in (
        lambda: services.fetch_host_key(as_alice, host.pk),
        lambda: services.confirm_host_key(as_alice, host.pk, SEEN),
    ):
        with pytest.raises(PermissionDenied, match="only platform admins"):
            call()
    assert Host.objects.get(pk=host.pk).host_key_pinned == ""
    rows = AuditLog.objects.filter(action__startswith="host.key.").order_by("pk")
    assert [(r.action, r.outcome) for r in rows] == [
        ("host.key.fetch", "forbidden"),
        ("host.key.confirm", "forbidden"),
    ]
