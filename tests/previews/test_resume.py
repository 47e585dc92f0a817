"""A preview request resumes a paused or stopped sandbox, but only once it is authorized: a
stranger's request (no credentials, a forged or misdirected token, another team's member)
is refused exactly as for a running sandbox and wakes nothing. On the in-memory backend with
a real loopback server as the sandbox's port (fixtures: tests/previews/conftest.py)."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from sandboxes import services
from sandboxes.contract.errors import NotFound, PermissionDenied
from sandboxes.models import Preview, Sandbox
from tenants.models import AuditLog
from tests.fakes import FakeBackend
from tests.previews.helpers import PAGE, ask, http_get

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("fresh")]


def status_of(sandbox_id: str) -> str:
    return Sandbox.objects.get(public_id=sandbox_id).status


def fetch(request) -> bytes:
    grant, stream = services.open_preview(request)
    with stream:
        stream.write(b"GET / HTTP/1.1\r\nHost: app\r\nConnection: close\r\n\r\n")
        stream.close_write()
        answer = b""
        while chunk := stream.read(65536, timeout=5):
            answer += chunk
    return answer


@pytest.mark.parametrize("how", ["pause", "stop"])
def test_an_unauthorized_preview_request_does_not_resume_the_sandbox(
    sandbox, as_alice, as_bob, listening, fake_backend, how
):
    link = services.get_preview_url(as_alice, sandbox, 8000)
    other = services.create_sandbox(as_alice, name="other").id
    misdirected = services.get_preview_url(as_alice, other, 8000)
    getattr(services, f"{how}_sandbox")(as_alice, sandbox)
    calls = list(fake_backend.lifecycle_calls)
    strangers = [
        ask(sandbox),  # no credentials at all
        ask(sandbox, token=link.token[:-4] + "abcd"),  # forged
        ask(sandbox, token=misdirected.token),  # another preview's token
        ask(sandbox, user_id=as_bob.user.pk, session_key="bob"),  # another team's member
    ]
    for request in strangers:
        with pytest.raises(NotFound):
            fetch(request)
        with pytest.raises(NotFound):
            services.authorize_preview(request)
    assert status_of(sandbox) == {"pause": "paused", "stop": "stopped"}[how]
    assert fake_backend.lifecycle_calls == calls
    assert not AuditLog.objects.filter(action="sandbox.resume").exists()

    # Authorized: the sandbox resumes first, then the app answers.
    answer = fetch(ask(sandbox, token=link.token))
    assert answer.startswith(b"HTTP/1.0 200") and answer.endswith(PAGE)
    assert status_of(sandbox) == "running"
    row = AuditLog.objects.get(action="sandbox.resume", target_id=sandbox)
    assert row.details["for"].startswith("preview.open") and row.actor is None


def test_a_members_session_resumes_it_for_the_preview_and_is_on_record(
    sandbox, as_alice, listening
):
    services.get_preview_url(as_alice, sandbox, 8000)
    services.pause_sandbox(as_alice, sandbox)
    # Its preview stays open while it is paused (the sweep closes only gone sandboxes').
    assert Preview.objects.stop_where_sandbox_stopped() == 0
    grant = services.authorize_preview(ask(sandbox, user_id=as_alice.user.pk, session_key="s"))
    assert status_of(sandbox) == "paused"  # authorizing alone wakes nothing
    assert http_get(grant).endswith(PAGE) and status_of(sandbox) == "running"
    row = AuditLog.objects.get(action="sandbox.resume", target_id=sandbox)
    assert row.actor is None  # open_preview_stream has the grant, not the request
    alice = get_user_model().objects.get(username="alice")
    services.pause_sandbox(as_alice, sandbox)
    fetch(ask(sandbox, user_id=alice.pk, session_key="s"))
    last = AuditLog.objects.filter(action="sandbox.resume").order_by("-id").first()
    assert last is not None and last.actor == alice and last.details["from"] == "paused"


def test_stop_app_on_a_paused_sandbox_ends_its_frozen_command(sandbox, as_alice, app_port):
    FakeBackend.apps[8000] = app_port
    deployed = services.deploy_app(as_alice, sandbox, command="serve 8000; sleep 1000", port=8000)
    services.pause_sandbox(as_alice, sandbox)
    services.stop_app(as_alice, sandbox, 8000)
    command = services.get_command(as_alice, deployed.command_id)
    assert command.status == "cancelled" and status_of(sandbox) == "running"


def test_a_refused_preview_request_keeps_the_row_true_to_the_host(
    sandbox, as_alice, team_a, fake_backend
):
    """The sandbox is resumed before the port is checked: a refusal after that must not roll
    the resume back in the database (the host did resume it)."""
    team_a.allowed_preview_ports = "3000"
    team_a.save()
    services.pause_sandbox(as_alice, sandbox)
    with pytest.raises(PermissionDenied):
        services.get_preview_url(as_alice, sandbox, 8000)
    (box,) = fake_backend.sandboxes.values()
    assert status_of(sandbox) == box["state"] == "running"
