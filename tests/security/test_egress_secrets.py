"""A secret's value appears in no answer: not in the REST list or the answer to its creation,
not on the team's Network tab, not in the admin's change list or change page, not in the
audit log; another team's secret is not found (the tenancy matrix, test_matrix.py, tries
every route with team B's secret)."""

from __future__ import annotations

import pytest
from django.test import Client
from rest_framework.test import APIClient

from sandboxes import services
from sandboxes.models import EgressSecret
from tenants import apikeys
from tenants.models import AuditLog
from tests.web.egress_helpers import SECRET_VALUE

pytestmark = pytest.mark.django_db


@pytest.fixture
def stored(as_alice) -> EgressSecret:
    info = services.add_secret(
        as_alice, name="OPENAI_API_KEY", hosts=["api.openai.com"], value=SECRET_VALUE
    )
    return EgressSecret.objects.get(pk=info.id)


def test_no_answer_shows_the_value(stored, alice, team_a, django_user_model) -> None:
    api = APIClient()
    api.credentials(
        HTTP_AUTHORIZATION=f"Bearer {apikeys.create_key(alice, team_a, name='t').plaintext}"
    )
    web = Client()
    web.force_login(alice)
    root = django_user_model.objects.create_superuser("root", "root@example.com", "pw-unused")
    staff = Client()
    staff.force_login(root)
    answers = {
        "REST list": api.get("/api/v1/team/secrets/"),
        "team page": web.get("/team/network/"),
        "admin list": staff.get("/admin/sandboxes/egresssecret/"),
        "admin page": staff.get(f"/admin/sandboxes/egresssecret/{stored.pk}/change/"),
    }
    for where, answer in answers.items():
        assert answer.status_code == 200, where
        text = answer.content.decode()
        assert "OPENAI_API_KEY" in text, where
        assert SECRET_VALUE not in text and stored.value_encrypted not in text, where
    details = " ".join(str(row.details) for row in AuditLog.objects.all())
    assert "OPENAI_API_KEY" in details and SECRET_VALUE not in details


def test_the_stored_value_is_encrypted(stored) -> None:
    assert SECRET_VALUE not in stored.value_encrypted and stored.value_encrypted
    assert SECRET_VALUE not in repr(stored) and SECRET_VALUE not in str(stored)


def test_another_teams_secret_is_not_found(stored, bob, team_b, as_bob) -> None:
    api = APIClient()
    api.credentials(
        HTTP_AUTHORIZATION=f"Bearer {apikeys.create_key(bob, team_b, name='t').plaintext}"
    )
    assert api.delete(f"/api/v1/team/secrets/{stored.pk}/").status_code == 404
    assert api.get("/api/v1/team/secrets/").json()["results"] == []
    web = Client()
    web.force_login(bob)
    assert web.post(f"/team/network/secrets/{stored.pk}/delete/").status_code == 404
    assert EgressSecret.objects.filter(pk=stored.pk).exists()
