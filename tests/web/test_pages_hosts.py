"""Hosts page: the hosts my team may use, load as bars, the idle score."""

from __future__ import annotations

import pytest

from hosts.models import Host

pytestmark = pytest.mark.django_db


def test_hosts_my_team_may_use(login, alice, team_a, team_b, docker_host):
    Host.objects.filter(pk=docker_host.pk).update(
        cpu_percent=35.0, memory_percent=92.0, idle_score=0.08
    )
    Host.objects.create(
        name="alpha-gpu", kind="docker", endpoint="unix:///a", team=team_a, gpu_percent=75.0
    )
    Host.objects.create(name="beta-only", kind="docker", endpoint="unix:///b", team=team_b)
    response = login(alice).get("/hosts/")
    assert response.status_code == 200
    page = response.content.decode()
    assert 'id="host-local"' in page and 'id="host-alpha-gpu"' in page
    assert "beta-only" not in page
    local = page[page.index('id="host-local"') :]
    local = local[: local.index("</article>")]
    assert 'aria-label="CPU" aria-valuemin="0" aria-valuemax="100" aria-valuenow="35"' in local
    assert 'class="bar high"' in local  # memory at 92 %
    assert "no GPU" in local and "0.08" in local and "0 of 20" in local
    gpu = page[page.index('id="host-alpha-gpu"') :]
    assert 'aria-label="GPU" aria-valuemin="0" aria-valuemax="100" aria-valuenow="75"' in gpu
    assert "private to your team" in gpu


def test_host_states(login, alice, docker_host):
    Host.objects.filter(pk=docker_host.pk).update(draining=True)
    assert "status-draining" in login(alice).get("/hosts/").content.decode()
    Host.objects.filter(pk=docker_host.pk).update(healthy=False, last_error="engine gone")
    page = login(alice).get("/hosts/").content.decode()
    assert "status-down" in page and "engine gone" in page


def test_viewer_sees_hosts(login, victor, docker_host):
    assert login(victor).get("/hosts/").status_code == 200


def test_no_host_empty_state(login, alice):
    page = login(alice).get("/hosts/").content.decode()
    assert "No host is available to your team" in page


@pytest.mark.audit_views
def test_listing_is_audited(login, alice, docker_host):
    from tenants.models import AuditLog

    login(alice).get("/hosts/")
    assert AuditLog.objects.get(action="host.list").channel == "web"


def test_hosts_is_get_only(login, alice):
    assert login(alice).post("/hosts/").status_code == 405
