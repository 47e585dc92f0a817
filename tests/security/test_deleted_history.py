"""The history of deleted sandboxes through the services (sandboxes/services/history.py):
another team's sandbox, deleted or not, answers exactly like a missing one; a team's members
and viewers read their own; reading is audited as a view and changes nothing."""

from __future__ import annotations

import pytest

from sandboxes import services
from sandboxes.contract.errors import NotFound
from sandboxes.models import Sandbox
from tenants.models import AuditLog

pytestmark = pytest.mark.django_db


@pytest.fixture
def deleted(fake_backend, as_alice) -> tuple[str, int]:
    sandbox = services.create_sandbox(as_alice, name="old").id
    command = services.run_command(as_alice, sandbox, "echo kept")
    services.delete_sandbox(as_alice, sandbox)
    return sandbox, command.id


def test_members_and_viewers_read_their_teams_deleted_sandbox(deleted, as_victor):
    sandbox, command_id = deleted
    history = services.sandbox_history(as_victor, sandbox)
    assert history.deleted and history.sandbox.status == "deleted"
    assert [c.command for c in history.commands] == ["echo kept"]
    one = services.history_command(as_victor, sandbox, command_id)
    assert one.commands[0].stdout == "kept\n"
    assert [s.id for s in services.list_deleted_sandboxes(as_victor)] == [sandbox]
    assert services.list_deleted_sandboxes(as_victor)[0].deleted_at is not None


def test_another_teams_deleted_sandbox_is_not_found(deleted, as_bob):
    sandbox, command_id = deleted
    rows = Sandbox.objects.count()
    for call in (
        lambda: services.sandbox_history(as_bob, sandbox),
        lambda: services.history_command(as_bob, sandbox, command_id),
    ):
        with pytest.raises(NotFound) as refused:
            call()
        assert str(refused.value) == f"sandbox {sandbox} not found"
    with pytest.raises(NotFound) as missing:
        services.sandbox_history(as_bob, "sb_0000ghost000")
    assert str(missing.value) == "sandbox sb_0000ghost000 not found"  # the same answer
    assert services.list_deleted_sandboxes(as_bob) == []
    assert Sandbox.objects.count() == rows
    refusals = AuditLog.objects.filter(actor=as_bob.user, action="command.list")
    assert {r.outcome for r in refusals} == {"not_found"} and refusals.count() == 2


def test_a_command_of_another_sandbox_is_not_under_this_one(fake_backend, deleted, as_alice):
    sandbox, command_id = deleted
    other = services.create_sandbox(as_alice, name="new").id
    with pytest.raises(NotFound):
        services.history_command(as_alice, other, command_id)
    live = services.sandbox_history(as_alice, other)
    assert not live.deleted and live.commands == []
