"""The audit log keeps changes, reads of data and refusals; views of metadata only when the
team asks (Team.audit_views); a change and its row are one transaction (issue 22).

A page view used to leave a row (570 rows in eleven minutes of one person using the pages),
which buried the changes an auditor looks for.
"""

from __future__ import annotations

import pytest
from django.db import IntegrityError

from dbkit import writes
from sandboxes import services
from sandboxes.contract.errors import NotFound
from sandboxes.models import CommandExecution
from tenants import audit
from tenants.auditing import AUDIT_VIEW, audited, calls_in_flight, change, unaudited
from tenants.models import AuditKind, AuditLog, Team
from tenants.principal import Principal

pytestmark = pytest.mark.django_db


def rows(action: str) -> list[AuditLog]:
    return list(AuditLog.objects.filter(action=action).order_by("id"))


@audited("test.rename", "team", atomic=True)
def rename_team(principal: Principal, name: str) -> None:
    Team.objects.filter(pk=principal.team.pk).update(name=name)


@audited("test.slow_rename", "team")
def slow_rename_team(principal: Principal, name: str) -> None:
    # A service that waits on a host first, then makes its change with its row.
    with change():
        Team.objects.filter(pk=principal.team.pk).update(name=name)


@audited("test.rename_twice", "team")
def rename_twice(principal: Principal, name: str) -> None:
    unaudited(slow_rename_team)(principal, name + " (step)")  # a step: its change, not its row
    with change():
        Team.objects.filter(pk=principal.team.pk).update(name=name)


def test_viewing_metadata_leaves_no_row_unless_the_team_asks(fake_backend, as_alice, team_a):
    created = services.create_sandbox(as_alice)
    services.list_sandboxes(as_alice)
    services.get_sandbox(as_alice, created.id)
    assert rows("sandbox.list") == rows("sandbox.get") == []
    team_a.audit_views = True
    team_a.save()
    services.list_sandboxes(as_alice)
    services.get_sandbox(as_alice, created.id)
    (listed,), (got,) = rows("sandbox.list"), rows("sandbox.get")
    assert (listed.kind, got.kind, got.target_id) == (AuditKind.VIEW, AuditKind.VIEW, created.id)
    # The change itself was on record all along, as a change.
    (made,) = rows("sandbox.create")
    assert (made.kind, made.outcome, made.target_id) == (AuditKind.CHANGE, "ok", created.id)


def test_a_refused_view_is_on_record_whatever_the_team_asks(fake_backend, as_alice, as_bob):
    theirs = services.create_sandbox(as_alice)
    with pytest.raises(NotFound):
        services.get_sandbox(as_bob, theirs.id)
    (refused,) = rows("sandbox.get")
    assert (refused.kind, refused.outcome, refused.team) == (
        AuditKind.VIEW,
        "not_found",
        as_bob.team,
    )


def test_reads_of_data_are_on_record(fake_backend, as_alice):
    created = services.create_sandbox(as_alice)
    services.write_file(as_alice, created.id, "/workspace/a.txt", "hello")
    services.read_file(as_alice, created.id, "/workspace/a.txt")
    (read,) = rows("files.read")
    assert (read.kind, read.outcome) == (AuditKind.READ, "ok")
    assert rows("files.write")[0].kind == AuditKind.CHANGE


@pytest.mark.parametrize("service", [rename_team, slow_rename_team])
def test_a_change_whose_row_cannot_be_written_is_rolled_back(
    as_alice, team_a, monkeypatch, service
):
    record = audit.record

    def no_ok_rows(*args, **kwargs):
        if kwargs.get("outcome", "ok") == "ok":
            raise RuntimeError("the audit log is full")
        return record(*args, **kwargs)

    monkeypatch.setattr(audit, "record", no_ok_rows)
    with pytest.raises(RuntimeError, match="full"):
        service(as_alice, "renamed")
    team_a.refresh_from_db()
    assert team_a.name == "Team Alpha"  # no change without its row
    (failed,) = AuditLog.objects.filter(action__startswith="test.")
    assert (failed.outcome, failed.kind) == ("error", AuditKind.CHANGE)


@pytest.mark.parametrize("service", [rename_team, slow_rename_team])
def test_a_change_and_its_row_are_written_together(as_alice, team_a, service):
    service(as_alice, "renamed")
    team_a.refresh_from_db()
    assert team_a.name == "renamed"
    (row,) = AuditLog.objects.filter(action__startswith="test.")
    assert (row.outcome, row.kind, row.team) == ("ok", AuditKind.CHANGE, team_a)


def test_a_step_run_unaudited_fills_in_the_actions_one_row(as_alice, team_a):
    rename_twice(as_alice, "final")
    team_a.refresh_from_db()
    assert team_a.name == "final"
    assert [r.action for r in AuditLog.objects.all()] == ["test.rename_twice"]


def test_only_a_change_can_share_its_transaction():
    with pytest.raises(AssertionError):
        audited("test.bad", kind=AUDIT_VIEW, atomic=True)


def test_a_command_whose_row_cannot_be_written_keeps_no_finished_record(
    fake_backend, as_alice, monkeypatch
):
    """The command hot path writes its record and its row as two compiled statements in one
    transaction (tenants.auditing.change_with): a failed row takes the record back with it."""
    created = services.create_sandbox(as_alice)
    real_insert = writes.insert

    def failing_audit_insert(obj):
        if isinstance(obj, AuditLog):
            return "INSERT INTO tenants_auditlog (action) VALUES (NULL)", ()  # NOT NULL
        return real_insert(obj)

    monkeypatch.setattr(writes, "insert", failing_audit_insert)
    with pytest.raises(IntegrityError):
        services.run_command(as_alice, created.id, "echo hi")
    execution = CommandExecution.objects.get(command="echo hi")
    assert (execution.status, execution.exit_code) == ("running", None)
    (failed,) = rows("command.run")
    assert (failed.outcome, failed.kind) == ("error", AuditKind.CHANGE)
    monkeypatch.undo()
    ran = services.run_command(as_alice, created.id, "echo again")
    assert ran.exit_code == 0
    row = rows("command.run")[-1]
    assert (row.outcome, row.details["status"], row.details["exit_code"]) == ("ok", "succeeded", 0)
    stored = CommandExecution.objects.get(pk=ran.id)
    assert (stored.status, stored.stdout) == ("succeeded", ran.stdout)


@pytest.fixture
def no_ok_rows(monkeypatch):
    """An audit log that takes refusals and failures but no row of a change that went well."""
    record = audit.record

    def refuse(*args, **kwargs):
        if kwargs.get("outcome", "ok") == "ok":
            raise RuntimeError("the audit log is full")
        return record(*args, **kwargs)

    monkeypatch.setattr(audit, "record", refuse)


def test_a_cancel_whose_row_cannot_be_written_records_no_end(fake_backend, as_alice, request):
    created = services.create_sandbox(as_alice)
    started = services.start_background(as_alice, created.id, "sleep 60")
    request.getfixturevalue("no_ok_rows")
    with pytest.raises(RuntimeError, match="full"):
        services.cancel_background(as_alice, created.id, started.id)
    # The host killed it, but its end was not recorded: the supervisor's next look will.
    assert CommandExecution.objects.get(pk=started.id).status == "running"
    assert [r.outcome for r in rows("command.background.cancel")] == ["error"]


def test_a_probe_whose_row_cannot_be_written_stores_nothing(fake_backend, docker_host, request):
    services.probe_host(Principal.system(), docker_host.pk)
    docker_host.refresh_from_db()
    probed_at = docker_host.last_probe_at
    request.getfixturevalue("no_ok_rows")
    with pytest.raises(RuntimeError, match="full"):
        services.probe_host(Principal.system(), docker_host.pk)
    docker_host.refresh_from_db()
    assert docker_host.last_probe_at == probed_at
    assert [r.outcome for r in rows("host.probe")] == ["ok", "error"]


def test_calls_in_flight_counts_a_call_while_it_is_served_whatever_its_end(as_alice):
    """What the warm pool's refill waits on (poolfill.py): back to where it was after a
    call, one that failed included."""
    seen: list[int] = []

    @audited("test.counted", kind=AuditKind.VIEW)
    def counted(principal: Principal, fail: bool) -> None:
        seen.append(calls_in_flight())
        if fail:
            raise NotFound("nothing here")

    before = calls_in_flight()
    counted(as_alice, False)
    with pytest.raises(NotFound):
        counted(as_alice, True)
    assert seen == [before + 1, before + 1]
    assert calls_in_flight() == before
