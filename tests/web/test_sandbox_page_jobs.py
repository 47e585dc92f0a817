"""Background jobs on the sandbox page (start, live tail, cancel), and the lifetime service
behind the page's "extend" form."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from sandboxes import services
from sandboxes.contract.errors import (
    Conflict,
    InvalidInput,
    NotFound,
    PermissionDenied,
    QuotaExceeded,
)
from sandboxes.models import CommandExecution, Sandbox
from tenants.models import AuditLog
from tests.web.helpers import field_errors

pytestmark = pytest.mark.django_db


# --- background jobs -------------------------------------------------------------------------


def test_start_tail_and_cancel_a_job(login, sandbox, alice):
    client = login(alice)
    response = client.post(
        f"/sandboxes/{sandbox}/jobs/start/", {"job-command": "echo started; sleep 30"}
    )
    assert response.status_code == 302
    job = CommandExecution.objects.get(background=True)
    assert response["Location"] == f"/sandboxes/{sandbox}/jobs/{job.id}/"
    page = client.get(response["Location"]).content.decode()
    assert 'hx-trigger="every 1s"' in page and "started" in page and 'id="job-cancel"' in page
    tail = client.get(f"/sandboxes/{sandbox}/jobs/{job.id}/tail/").content.decode()
    assert tail.lstrip().startswith('<div id="job-tail"') and 'hx-trigger="every 1s"' in tail
    listed = client.get(f"/sandboxes/{sandbox}/").content.decode()
    assert "echo started; sleep 30" in listed and "Live output" in listed
    cancelled = client.post(f"/sandboxes/{sandbox}/jobs/{job.id}/cancel/")
    assert cancelled.status_code == 302
    job.refresh_from_db()
    assert job.status == "cancelled"
    ended = client.get(f"/sandboxes/{sandbox}/jobs/{job.id}/tail/").content.decode()
    assert "hx-trigger" not in ended and "cancelled" in ended  # the polling stops


def test_a_finished_job_stops_polling(login, sandbox, alice, as_alice):
    job = services.start_background(as_alice, sandbox, "echo quick")
    tail = login(alice).get(f"/sandboxes/{sandbox}/jobs/{job.id}/tail/").content.decode()
    assert "hx-trigger" not in tail and "quick" in tail and "succeeded" in tail


@pytest.mark.parametrize(
    "data", [{}, {"job-command": " "}, {"job-command": "x", "job-max_runtime_seconds": "0"}]
)
def test_start_with_bad_input_starts_nothing(login, sandbox, alice, data):
    response = login(alice).post(f"/sandboxes/{sandbox}/jobs/start/", data)
    assert response.status_code == 400
    html = response.content.decode()
    assert field_errors(html, "job-command") or field_errors(html, "job-max_runtime_seconds")
    assert not CommandExecution.objects.exists()


def test_a_job_id_of_another_kind_is_not_found(login, sandbox, alice, as_alice):
    plain = services.run_command(as_alice, sandbox, "echo not a job")
    client = login(alice)
    assert client.get(f"/sandboxes/{sandbox}/jobs/{plain.id}/").status_code == 404
    assert client.post(f"/sandboxes/{sandbox}/jobs/{plain.id}/cancel/").status_code == 404


# --- extending a sandbox's life (the service) ----------------------------------------


def test_extend_sandbox_refusals(sandbox, as_alice, as_victor, as_bob):
    before = Sandbox.objects.get(public_id=sandbox).expires_at
    for minutes in (0, -1, True, "5", 1.5):
        with pytest.raises(InvalidInput):
            services.extend_sandbox(as_alice, sandbox, minutes)
    with pytest.raises(PermissionDenied):
        services.extend_sandbox(as_victor, sandbox, 5)
    with pytest.raises(NotFound):
        services.extend_sandbox(as_bob, sandbox, 5)
    Sandbox.objects.filter(public_id=sandbox).update(status="lost")
    with pytest.raises(Conflict):
        services.extend_sandbox(as_alice, sandbox, 5)
    assert Sandbox.objects.get(public_id=sandbox).expires_at == before
    refusals = AuditLog.objects.filter(action="sandbox.extend").exclude(outcome="ok")
    assert refusals.count() == 8


def test_extend_counts_from_now_once_past_the_expiry(sandbox, as_alice, team_a):
    past = timezone.now() - timedelta(minutes=5)
    Sandbox.objects.filter(public_id=sandbox).update(expires_at=past)
    info = services.extend_sandbox(as_alice, sandbox, 10)
    assert timedelta(minutes=9) < info.expires_at - timezone.now() <= timedelta(minutes=10)
    left = services.extendable_minutes(info, team_a)
    ceiling = services.latest_expiry(info.created_at, team_a)
    assert abs((ceiling - info.expires_at).total_seconds() / 60 - left) <= 1
    services.extend_sandbox(as_alice, sandbox, left)  # up to the ceiling exactly: allowed
    with pytest.raises(QuotaExceeded, match="at most 0 more minutes"):
        services.extend_sandbox(as_alice, sandbox, 1)
