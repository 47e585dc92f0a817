"""deploy_app and stop_app in the service layer, on the in-memory backend: a job with a
`serve PORT` step is an app answering on PORT (a real loopback server) while it runs. The app
comes up and its preview opens; a crashing app gives its log tail, a silent one is cancelled
after wait_seconds, and neither leaves a preview; deploying again replaces the app."""

from __future__ import annotations

import pytest

from sandboxes import services
from sandboxes.contract.errors import Conflict, InvalidInput, NotFound
from sandboxes.models import CommandExecution, Preview
from tenants.models import AuditLog
from tests.fakes import FakeBackend
from tests.previews.helpers import PAGE, ask, http_get

# `fresh` (tests/previews/conftest.py): no port maps or cached audits of an earlier test.
pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("fresh")]


# --- deploy_app and stop_app -----------------------------------------------------------------


def test_deploy_app_waits_for_the_port_and_opens_its_preview(sandbox, as_alice, app_port):
    FakeBackend.apps[8000] = app_port
    # The last id, not the count: ids are not reused (PostgreSQL's sequences outlive the
    # rolled-back rows of earlier tests), so the count may lie below existing ids.
    before = AuditLog.objects.order_by("-pk").values_list("pk", flat=True).first() or 0
    app = services.deploy_app(
        as_alice, sandbox, command="echo starting; serve 8000; sleep 600", port=8000
    )
    preview = Preview.objects.get(pk=app.preview_id)
    assert (preview.port, preview.command_id, preview.stopped_at) == (8000, app.command_id, None)
    assert CommandExecution.objects.get(pk=app.command_id).status == "running"
    grant = services.authorize_preview(ask(sandbox, token=app.token))
    assert http_get(grant).endswith(PAGE)
    rows = list(AuditLog.objects.filter(pk__gt=before).order_by("id"))
    # The deploy's row went in with the app's command; its end (the preview) continues it.
    assert [r.action for r in rows] == ["app.deploy", "app.deploy", "preview.opened"]
    assert rows[1].details["continues"] == rows[0].pk and "preview_id" in rows[1].details
    assert rows[0].details["command_id"] == app.command_id and rows[0].details["port"] == 8000

    stopped = services.stop_app(as_alice, sandbox, 8000)
    assert stopped.stopped_at is not None and stopped.command_id == app.command_id
    assert CommandExecution.objects.get(pk=app.command_id).status == "cancelled"
    assert AuditLog.objects.latest("id").action == "app.stop"
    with pytest.raises(NotFound):
        services.authorize_preview(ask(sandbox, token=app.token))
    with pytest.raises(NotFound, match="no open preview on port 8000"):
        services.stop_app(as_alice, sandbox, 8000)


def test_a_crashing_app_gives_its_log_tail_and_leaves_nothing(sandbox, as_alice):
    with pytest.raises(services.DeployFailed) as failed:
        services.deploy_app(
            as_alice,
            sandbox,
            command="echo loading config; echo Traceback: boom; exit 3",
            port=8000,
        )
    message = failed.value.message
    assert "exit code 3" in message and "Traceback: boom" in message and "loading config" in message
    assert not Preview.objects.exists()
    assert CommandExecution.objects.get(background=True).status == "failed"
    row = AuditLog.objects.latest("id")
    assert (row.action, row.outcome) == ("app.deploy", "deploy_failed")


def test_a_silent_app_is_cancelled_after_wait_seconds(sandbox, as_alice):
    with pytest.raises(services.DeployFailed, match="did not answer within 1 s") as failed:
        services.deploy_app(
            as_alice, sandbox, command="echo up but elsewhere; sleep 600", port=8000, wait_seconds=1
        )
    assert "up but elsewhere" in failed.value.message
    assert CommandExecution.objects.get(background=True).status == "cancelled"
    assert not Preview.objects.exists()


def test_an_app_that_daemonizes_is_told_to_stay_in_the_foreground(sandbox, as_alice):
    with pytest.raises(services.DeployFailed, match="in the foreground"):
        services.deploy_app(as_alice, sandbox, command="echo forked", port=8000, wait_seconds=1)


def test_deploying_again_replaces_the_app(sandbox, as_alice, app_port):
    FakeBackend.apps[8000] = app_port
    first = services.deploy_app(as_alice, sandbox, command="serve 8000; sleep 600", port=8000)
    second = services.deploy_app(as_alice, sandbox, command="serve 8000; sleep 600", port=8000)
    assert CommandExecution.objects.get(pk=first.command_id).status == "cancelled"
    assert Preview.objects.get(pk=first.preview_id).stopped_at is not None
    assert Preview.objects.open().get().pk == second.preview_id


def test_deploy_refuses_a_port_something_else_holds(sandbox, as_alice, listening):
    with pytest.raises(Conflict, match="already listens on port 8000"):
        services.deploy_app(as_alice, sandbox, command="serve 8000; sleep 600", port=8000)
    assert not CommandExecution.objects.filter(background=True).exists()


def test_deploy_arguments_are_checked(sandbox, as_alice):
    for bad in [
        {"command": "", "port": 8000},
        {"command": "serve 8000", "port": 70000},
        {"command": "serve 8000", "port": 8000, "wait_seconds": 0},
        {"command": "serve 8000", "port": 8000, "wait_seconds": services.MAX_WAIT_SECONDS + 1},
    ]:
        with pytest.raises(InvalidInput):
            services.deploy_app(as_alice, sandbox, **bad)
