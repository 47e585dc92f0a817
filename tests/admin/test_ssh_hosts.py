"""Admin for SSH hosts: the host key's state in the host list, the confirmation page that
shows each fingerprint and pins only what it showed, whether a host isolates its sandboxes
(and why not), read-only, and the passphrase of a private key stored encrypted, never shown.
Fixtures: tests/admin/conftest.py."""

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
REASONS = "bubblewrap (bwrap) is not installed\nno cgroup freezer"
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


def test_the_host_pages_say_whether_sandboxes_are_isolated_and_why_not(
    staff_client: Client, team_a
) -> None:
    host = ssh_host(per_sandbox_users=True, isolation_missing=REASONS)

    def column() -> bytes:
        listed = staff_client.get(url(Host, "changelist")).content
        return listed.split(b'<td class="field-isolation">')[1].split(b"<")[0]

    assert column() == b"no: not used (shared)"
    Host.objects.filter(pk=host.pk).update(team=team_a)
    assert column() == b"no: its team only"
    page = staff_client.get(url(Host, "change", host.pk)).content.decode()
    assert "why not" in page and "no cgroup freezer" in page
    assert "bubblewrap (bwrap) is not installed<br>no cgroup freezer" in page  # a line each
    assert 'name="isolated"' not in page and 'name="isolation_missing"' not in page  # probes'
    Host.objects.filter(pk=host.pk).update(isolated=True, isolation_missing="")
    assert column() == b"yes"
    assert b"no cgroup freezer" not in staff_client.get(url(Host, "change", host.pk)).content
