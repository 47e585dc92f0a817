"""Django admin's view of file links and preview tokens: listed and shown, never added,
changed, revoked or deleted there (the services do that, with their audit rows); the secret
is not kept, and its hash is not shown."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib import admin
from django.test import Client, RequestFactory
from django.utils import timezone

from sandboxes.models import AccessLink, LinkKind
from tenants.models import Membership, Role
from tests.admin.helpers import World, url

pytestmark = pytest.mark.django_db


@pytest.fixture
def link(world: World) -> AccessLink:
    membership = Membership.objects.get(user__username="alice")
    return AccessLink.objects.create(
        kind=LinkKind.FILE,
        secret_hash="0" * 64,
        sandbox=world.sandbox,
        membership=membership,
        created_by=membership.user,
        path="/workspace/report.txt",
        min_role=Role.MEMBER,
        expires_at=timezone.now() + timedelta(hours=1),
    )


def test_links_are_read_only_in_admin(superuser, staff_client: Client, link: AccessLink) -> None:
    request = RequestFactory().get("/")
    request.user = superuser
    model_admin = admin.site._registry[AccessLink]
    assert model_admin.has_view_permission(request)
    assert not model_admin.has_add_permission(request)
    assert not model_admin.has_change_permission(request)
    assert not model_admin.has_delete_permission(request)
    listing = staff_client.get(url(AccessLink, "changelist"))
    assert listing.status_code == 200 and link.public_id.encode() in listing.content
    page = staff_client.get(url(AccessLink, "change", link.pk))
    assert page.status_code == 200 and b"/workspace/report.txt" in page.content
    assert link.secret_hash.encode() not in page.content
    forged = staff_client.post(url(AccessLink, "change", link.pk), {"revoked_at": "2000-01-01"})
    assert forged.status_code == 403
    assert staff_client.post(url(AccessLink, "delete", link.pk), {"post": "yes"}).status_code == 403
    link.refresh_from_db()
    assert link.revoked_at is None
