"""The usage charts (sandboxes/web/charts.py, templates/web/_chart.html): the sandbox page's
partial (viewers see it, another team's sandbox is refused like a missing one), the hosts
page's charts, and the sparkline itself: points in the box, gaps, labels that say the latest
value and the range. Test client and in-memory backend; Chromium: test_browser_usage.py."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from hosts.models import Host
from sandboxes.housekeeping import probes, usage
from sandboxes.models import HostUsageSample
from sandboxes.web import charts

pytestmark = pytest.mark.django_db


def test_a_sparkline_stays_in_its_box_and_breaks_at_gaps() -> None:
    now = timezone.now()
    times = [now - timedelta(minutes=m) for m in (50, 40, 30, 20, 10)]
    made = charts.chart(
        "mem",
        "Memory",
        times,
        [10, 20, None, 200, 50],
        minutes=60,
        fmt=charts.count,
        limit=100,
        now=now,
    )
    assert len(made.segments) == 2
    for segment in made.segments:
        for point in segment.split():
            x, y = map(float, point.split(","))
            assert 0 <= x <= charts.WIDTH and 0 <= y <= charts.HEIGHT
    assert made.latest == "50 of 100" and made.axis_max == "100"
    assert made.label == "Memory: 50 of 100 now; last 60 minutes: 10 to 200"
    empty = charts.chart("x", "Disk", [], [], minutes=60, fmt=charts.human_bytes)
    assert empty.empty and empty.segments == [] and "no samples" in empty.label


def test_bytes_read_as_people_read_them() -> None:
    assert charts.human_bytes(512) == "512 B"
    assert charts.human_bytes(100 * 1024 * 1024) == "100 MiB"
    assert charts.human_bytes(1.5 * 1024**3) == "1.5 GiB"


def test_the_sandbox_page_loads_its_usage_charts(login, alice, victor, sandbox) -> None:
    page = login(alice).get(f"/sandboxes/{sandbox}/").content.decode()
    assert f'hx-get="/sandboxes/{sandbox}/usage/"' in page and 'id="usage"' in page
    usage.sample_round()
    usage.sample_round()
    for user in (alice, victor):  # viewers too
        partial = login(user).get(f"/sandboxes/{sandbox}/usage/")
        assert partial.status_code == 200
        body = partial.content.decode()
        labels = re.findall(r'role="img" aria-label="([^"]+)"', body)
        assert len(labels) == 4, body
        assert labels[1].startswith("Memory: 10.0 MiB of ") and "last 60 minutes" in labels[1]
        assert "style=" not in body and "<polyline" in body


def test_another_teams_sandbox_usage_is_refused(login, bob, sandbox) -> None:
    theirs = login(bob).get(f"/sandboxes/{sandbox}/usage/")
    missing = login(bob).get("/sandboxes/sb_doesnotexist00/usage/")
    assert theirs.status_code == missing.status_code == 404


def test_the_hosts_page_draws_each_hosts_load(login, alice, fake_backend, docker_host) -> None:
    probes.probe_hosts([docker_host])
    HostUsageSample.objects.create(
        host=docker_host,
        at=timezone.now() - timedelta(minutes=5),
        cpu_percent=40.0,
        memory_percent=60.0,
    )
    page = login(alice).get("/hosts/").content.decode()
    local = page[page.index('id="host-local"') :]
    local = local[: local.index("</article>")]
    assert 'id="chart-local-cpu"' in local and 'id="chart-local-memory"' in local
    assert re.search(r'role="img" aria-label="CPU: [^"]+ now; last 60 minutes', local)


def test_a_host_without_samples_says_so(login, alice, docker_host) -> None:
    Host.objects.filter(pk=docker_host.pk).update(cpu_percent=10.0)
    page = login(alice).get("/hosts/").content.decode()
    assert "CPU: no samples in the last 60 minutes" in page
