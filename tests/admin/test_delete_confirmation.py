"""The bulk delete's confirmation of sandboxes and snapshots says one thing: what is removed
and what stays as history, without Django's "everything will be deleted" beside it."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from sandboxes.models import Sandbox
from tests.admin.helpers import World, action

pytestmark = pytest.mark.django_db

CONTRADICTION = ("will be deleted", "related items", "All of the following")


def section(page: str, heading: str) -> str:
    found = re.search(rf"<h2>{heading}</h2>\s*<ul[^>]*>(.*?)</ul>", page, re.S)
    assert found, f"no {heading!r} list on the page"
    return found.group(1)


def test_sandbox_delete_confirmation_tells_one_truth(staff_client: Client, world: World) -> None:
    page = action(staff_client, Sandbox, "delete_selected", [world.sandbox.pk]).content.decode()
    for words in CONTRADICTION:
        assert words not in page
    removed, kept = section(page, "Deleted"), section(page, "Kept")
    assert "workspace files" in removed and "container" in removed
    assert "command history" in kept and "audit log" in kept and "record" in kept
    # Nothing is said to be both removed and kept.
    assert "history" not in removed
    assert world.sandbox.public_id in page
