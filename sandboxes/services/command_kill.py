"""Killing a running foreground command, from any platform process: its processes carry the
marker recorded in its row (commands.py), and the backend kills what carries it. The command's
own call then returns as it would for any killed command and records its end."""

from __future__ import annotations

from hosts.backends.base import BackendError
from sandboxes.contract.errors import BackendFailure, NotFound
from sandboxes.models import CommandStatus
from sandboxes.policy import validation
from sandboxes.policy.access import WRITE
from sandboxes.services.common import backend_of, running_sandbox
from tenants.auditing import audited, current
from tenants.principal import Principal


@audited("command.kill", "sandbox")
def kill_command(principal: Principal, sandbox_id: str, command_id: int) -> bool:
    """SIGKILL a running foreground command of the sandbox; False if it had ended already
    (nothing is done then). Background commands have cancel_background."""
    current().target("sandbox", sandbox_id)
    validation.positive_int(command_id, "command id", minimum=1)
    sandbox = running_sandbox(principal, sandbox_id, WRITE, "kill commands")
    execution = (
        sandbox.commands.filter(pk=command_id, background=False)
        .only("status", "background_state")
        .first()
    )
    if execution is None:
        raise NotFound(f"command {command_id} not found in sandbox {sandbox_id}")
    current().details["command_id"] = command_id
    marker = (execution.background_state or {}).get("marker")
    if execution.status != CommandStatus.RUNNING or not marker:
        return False
    try:
        backend_of(sandbox).kill_command(sandbox.backend_state, str(marker))
    except BackendError as exc:
        raise BackendFailure(f"could not kill command {command_id}: {exc}") from exc
    current().details["killed"] = True
    return True
