"""Durations are shown in a unit people read (sandboxes/contract/formatting.py), in the
command executions' admin list and page, never as the float of seconds stored."""

from __future__ import annotations

import pytest
from django.test import Client

from sandboxes.contract.formatting import human_duration
from tests.admin.helpers import World, url

RAW = 0.006520756999975674


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (None, "—"),
        (RAW, "6.5 ms"),
        (0.0004, "0.4 ms"),
        (0.9999999, "999.9 ms"),
        (1.2345, "1.2 s"),
        (12.0, "12 s"),
        (59.94, "59.9 s"),
        (184.2, "3 min 4 s"),
        (120, "2 min"),
        (7500, "2 h 5 min"),
        (3 * 86400 + 3600, "3 d 1 h"),
    ],
)
def test_human_duration(seconds, shown) -> None:
    assert human_duration(seconds) == shown


@pytest.mark.django_db
def test_admin_shows_command_durations_readably(staff_client: Client, world: World) -> None:
    world.command.duration_seconds = RAW
    world.command.save(update_fields=["duration_seconds"])
    listing = staff_client.get(url(world.command, "changelist")).content.decode()
    page = staff_client.get(url(world.command, "change", world.command.pk)).content.decode()
    for html in (listing, page):
        assert "6.5 ms" in html
        assert str(RAW) not in html and "0.0065" not in html
