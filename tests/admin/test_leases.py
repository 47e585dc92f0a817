"""Admin: the platform's processes by their liveness leases, read-only (a live one, a released
one); nobody can add, change or delete a lease there."""

from __future__ import annotations

import pytest
from django.test import Client

from sandboxes.housekeeping import liveness
from sandboxes.models import ProcessLease
from tests.admin.helpers import url

pytestmark = pytest.mark.django_db


def test_leases_are_listed_and_shown_read_only(staff_client: Client) -> None:
    live = liveness.take("web")
    ended = liveness.take("worker")
    liveness.release(ended)

    listing = staff_client.get(url(ProcessLease, "changelist"))
    assert listing.status_code == 200
    assert listing.content.count(b"/admin/sandboxes/processlease/") >= 2
    assert staff_client.get(url(ProcessLease, "changelist"), {"q": "x"}).status_code == 200
    for pk in (live, ended):
        page = staff_client.get(url(ProcessLease, "change", pk))
        assert page.status_code == 200
        assert b'name="_save"' not in page.content  # nothing to save

    assert staff_client.get(url(ProcessLease, "add")).status_code == 403
    assert staff_client.post(url(ProcessLease, "delete", live), {"post": "yes"}).status_code == 403
    assert ProcessLease.objects.filter(pk=live, ended_at__isnull=True).exists()
