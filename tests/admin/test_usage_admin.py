"""Usage charts on admin's change pages (hosts/admin/usage.py): a sandbox's and a host's
last hour drawn as the team pages draw it, labelled for screen readers; the samples' own
lists are read-only. Fixtures: tests/admin/conftest.py."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from sandboxes.models import HostUsageSample, UsageSample
from tests.admin.helpers import World, url

pytestmark = pytest.mark.django_db


def test_the_sandbox_change_page_draws_its_usage(staff_client: Client, world: World) -> None:
    UsageSample.objects.create(
        sandbox=world.sandbox,
        at=timezone.now() - timedelta(minutes=2),
        memory_bytes=64 << 20,
        memory_limit_bytes=256 << 20,
        cpu_percent=12.0,
        pids=4,
        pids_limit=64,
    )
    page = staff_client.get(url(world.sandbox, "change", world.sandbox.pk)).content.decode()
    labels = re.findall(r'role="img" aria-label="([^"]+)"', page)
    assert "Memory: 64.0 MiB of 256 MiB now; last 60 minutes: 64.0 MiB to 64.0 MiB" in labels
    assert "CPU: 12 % of 1 CPU now; last 60 minutes: 12 % to 12 %" in labels
    assert "web/usage.css" in page


def test_the_host_change_page_draws_its_load(staff_client: Client, world: World) -> None:
    HostUsageSample.objects.create(
        host=world.host,
        at=timezone.now() - timedelta(minutes=1),
        cpu_percent=30.0,
        memory_percent=50.0,
        sandboxes_running=2,
    )
    page = staff_client.get(url(world.host, "change", world.host.pk)).content.decode()
    assert re.search(r'role="img" aria-label="CPU: 30 % now', page)
    assert f'id="chart-host-{world.host.pk}-memory"' in page


def test_sample_lists_render_and_are_read_only(staff_client: Client, world: World) -> None:
    sample = UsageSample.objects.create(sandbox=world.sandbox, at=timezone.now())
    assert staff_client.get(url(sample, "changelist")).status_code == 200
    assert staff_client.get(url(HostUsageSample, "changelist")).status_code == 200
    assert staff_client.get(url(sample, "add")).status_code == 403
