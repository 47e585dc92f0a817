"""A sandbox's command history whatever its state, deleted sandboxes included: deleting a
sandbox removes its files, never its history, and every member of its team (viewers too) may
read that history, as they could while it lived. Another team's sandbox, deleted or not, is not
found. Reading changes nothing; each read is audited as a view."""

from __future__ import annotations

from django.db.models import QuerySet

from sandboxes.contract.errors import NotFound
from sandboxes.contract.history import DeletedSandboxInfo, SandboxHistory
from sandboxes.contract.results import CommandResult, SandboxInfo
from sandboxes.models import CommandExecution, Sandbox, SandboxStatus
from sandboxes.policy import access, validation
from sandboxes.policy.access import READ
from tenants.auditing import AUDIT_VIEW, audited, current
from tenants.principal import Principal

MAX_DELETED = 500


def _team_sandboxes(principal: Principal, doing: str) -> QuerySet[Sandbox]:
    """Every sandbox of the principal's team, deleted ones included (a platform admin acting
    without a team: every team's), if the role may read."""
    access.require(principal, READ, doing)
    rows = Sandbox.objects.select_related("team", "owner", "host", "image")
    if access.is_platform_admin(principal) and principal.team is None:
        return rows
    return rows.filter(team=principal.team)


def _sandbox(principal: Principal, sandbox_id: str, doing: str) -> Sandbox:
    validation.sandbox_id(sandbox_id)
    found = _team_sandboxes(principal, doing).filter(public_id=sandbox_id).first()
    if found is None:
        raise NotFound(f"sandbox {sandbox_id} not found")
    return found


@audited("sandbox.list_deleted", "team", kind=AUDIT_VIEW)
def list_deleted_sandboxes(principal: Principal) -> list[DeletedSandboxInfo]:
    """The team's deleted sandboxes, the most recently deleted first."""
    if principal.team is not None:
        current().target("team", principal.team.slug)
    rows = _team_sandboxes(principal, "see deleted sandboxes").filter(status=SandboxStatus.DELETED)
    rows = rows.order_by("-deleted_at", "-id")[:MAX_DELETED]
    return [DeletedSandboxInfo.of_deleted(s) for s in rows]


@audited("command.list", "sandbox", kind=AUDIT_VIEW)
def sandbox_history(principal: Principal, sandbox_id: str, *, limit: int = 50) -> SandboxHistory:
    """The sandbox, deleted or not, and its newest commands."""
    current().target("sandbox", sandbox_id)
    validation.positive_int(limit, "limit", minimum=1, maximum=500)
    sandbox = _sandbox(principal, sandbox_id, "see command history")
    executions = sandbox.commands.select_related("sandbox", "actor")[:limit]
    return SandboxHistory(
        sandbox=SandboxInfo.from_model(sandbox),
        deleted=sandbox.status == SandboxStatus.DELETED,
        commands=[CommandResult.from_model(e) for e in executions],
    )


@audited("command.get", "command", kind=AUDIT_VIEW)
def history_command(principal: Principal, sandbox_id: str, command_id: int) -> SandboxHistory:
    """One command of the sandbox (deleted or not), with its stored output: the sandbox and
    that command alone."""
    current().target("command", command_id)
    validation.positive_int(command_id, "command id", minimum=1)
    sandbox = _sandbox(principal, sandbox_id, "see command history")
    execution = (
        CommandExecution.objects.select_related("sandbox", "actor")
        .filter(pk=command_id, sandbox=sandbox)
        .first()
    )
    if execution is None:
        raise NotFound(f"command {command_id} not found in {sandbox_id}")
    return SandboxHistory(
        sandbox=SandboxInfo.from_model(sandbox),
        deleted=sandbox.status == SandboxStatus.DELETED,
        commands=[CommandResult.from_model(execution)],
    )
