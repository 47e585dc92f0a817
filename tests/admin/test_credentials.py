"""Django admin's credentials: secrets stay write-only (stored encrypted, never shown, never
echoed by a rejected form), required on add, kept or replaced on change. Fixtures:
tests/admin/conftest.py."""

from __future__ import annotations

import pytest
from django.test import Client

from hosts.models import Credential
from tests.admin.helpers import SECRET, World, url

pytestmark = pytest.mark.django_db


def test_credential_add_stores_secret_encrypted(staff_client: Client) -> None:
    response = staff_client.post(
        url(Credential, "add"),
        {"name": "box", "kind": Credential.Kind.PASSWORD, "username": "root", "secret": SECRET},
    )
    assert response.status_code == 302, response.content
    credential = Credential.objects.get(name="box")
    column = Credential.objects.filter(pk=credential.pk).values_list("secret_encrypted", flat=True)[
        0
    ]
    assert SECRET not in column
    assert credential.get_secret() == SECRET


def test_credential_change_page_shows_neither_secret_nor_ciphertext(
    staff_client: Client, world: World
) -> None:
    page = staff_client.get(url(Credential, "change", world.credential.pk)).content.decode()
    assert SECRET not in page
    assert world.credential.secret_encrypted not in page
    assert 'name="secret"' in page


def test_credential_secret_required_on_add(staff_client: Client) -> None:
    response = staff_client.post(
        url(Credential, "add"), {"name": "box", "kind": Credential.Kind.PASSWORD}
    )
    assert response.status_code == 200
    assert "This field is required" in response.content.decode()
    assert not Credential.objects.filter(name="box").exists()


def test_rejected_form_does_not_echo_the_secret(staff_client: Client) -> None:
    # The name is missing, so the form comes back with errors: the secret must not be in it.
    response = staff_client.post(
        url(Credential, "add"), {"kind": Credential.Kind.PASSWORD, "secret": SECRET}
    )
    assert response.status_code == 200
    assert SECRET not in response.content.decode()


def test_docker_tls_secret_must_be_json(staff_client: Client) -> None:
    response = staff_client.post(
        url(Credential, "add"),
        {"name": "tls2", "kind": Credential.Kind.DOCKER_TLS, "secret": SECRET},
    )
    page = response.content.decode()
    assert "must be a JSON object" in page
    assert SECRET not in page
    assert not Credential.objects.filter(name="tls2").exists()


def test_credential_change_keeps_or_replaces_secret(staff_client: Client, world: World) -> None:
    change = url(Credential, "change", world.credential.pk)
    form = {"name": "tls", "kind": Credential.Kind.PASSWORD, "username": "ops2"}
    assert staff_client.post(change, {**form, "secret": ""}).status_code == 302
    world.credential.refresh_from_db()
    assert world.credential.username == "ops2"
    assert world.credential.get_secret() == SECRET

    assert staff_client.post(change, {**form, "secret": "new\r\nsecret"}).status_code == 302
    world.credential.refresh_from_db()
    assert world.credential.get_secret() == "new\nsecret"
