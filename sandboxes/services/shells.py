"""Shell sessions: `run_command(session=name)` runs in a long-lived shell of that name in the
sandbox (hosts/backends/interactive.py run_in_shell), so cwd, variables, functions and
options carry over between calls; without a name commands stay stateless. Each session has
a Terminal row of kind "shell" (who started it, when it ended); its commands are in the
command history like any other. Also the `stdin` a command may be given."""

from __future__ import annotations

import re

from django.db import IntegrityError, transaction
from django.utils import timezone

from hosts.backends.base import ExecResult, OutputCallback
from sandboxes.contract.errors import InvalidInput, NotFound
from sandboxes.contract.terminals import SessionResult
from sandboxes.models import Sandbox, SandboxStatus, Terminal, TerminalKind
from sandboxes.policy import access
from sandboxes.policy.access import READ, WRITE
from sandboxes.services.common import backend_errors, backend_of
from sandboxes.services.terminals import close_if_sandbox_ended, idle_timeout_of, reconcile
from tenants.auditing import AUDIT_VIEW, audited, change, current
from tenants.principal import Principal

SESSION_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,39}$")
# What a command may be given on its standard input: held in memory on its way in.
MAX_STDIN_BYTES = 1024 * 1024


def session_name(value: object) -> str:
    if not isinstance(value, str) or not SESSION_NAME_RE.match(value):
        raise InvalidInput(
            f"session name {str(value)[:40]!r} is not valid: 1 to 40 lowercase letters, digits "
            "and '-', starting with a letter or digit (e.g. 'main')"
        )
    return value


def stdin_bytes(value: object) -> bytes | None:
    """A command's standard input (text), checked against MAX_STDIN_BYTES."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidInput("stdin must be text")
    data = value.encode("utf-8", "surrogateescape")
    if len(data) > MAX_STDIN_BYTES:
        raise InvalidInput(
            f"stdin is {len(data)} bytes, more than the {MAX_STDIN_BYTES} bytes (1 MiB) a "
            "command may be given: write it to a file instead (write_file / upload)"
        )
    return data


def run_in_session(
    principal: Principal,
    sandbox: Sandbox,
    session: str,
    command: str,
    *,
    env: dict[str, str],
    timeout: float,
    output_cap: int,
    on_output: OutputCallback | None,
    stdin: bytes | None,
) -> ExecResult:
    """Run shell text in the session's shell (started on first use); the session's row is
    created then, and touched on every command. BackendError as the backend raises it."""
    row = _open_session(principal, sandbox, session)
    Terminal.objects.filter(pk=row.pk).update(last_seen_at=timezone.now())
    return backend_of(sandbox).run_in_shell(
        sandbox.backend_state,
        row.backend_id,
        command,
        env=env,
        timeout=timeout,
        output_cap=output_cap,
        idle_timeout=idle_timeout_of(sandbox),
        on_output=on_output,
        stdin=stdin,
    )


def _open_session(principal: Principal, sandbox: Sandbox, name: str) -> Terminal:
    found = _sessions(sandbox).filter(name=name).first()
    if found is not None:
        return found
    try:
        with transaction.atomic():
            return Terminal.objects.create(
                sandbox=sandbox,
                kind=TerminalKind.SHELL,
                name=name,
                opened_by=principal.user,
                api_key=principal.extra.get("api_key", ""),
                channel=principal.channel,
            )
    except IntegrityError:  # started by a concurrent command of the same session
        return _sessions(sandbox).get(name=name)


@audited("session.list", "sandbox", kind=AUDIT_VIEW)
def list_sessions(principal: Principal, sandbox_id: str) -> list[SessionResult]:
    """The sandbox's shell sessions that still run (ended ones are marked closed here)."""
    current().target("sandbox", sandbox_id)
    sandbox = access.get_sandbox(principal, sandbox_id, READ, "see shell sessions")
    close_if_sandbox_ended(sandbox)
    if sandbox.status == SandboxStatus.RUNNING and _sessions(sandbox).exists():
        with backend_errors(sandbox, "list shell sessions"):
            reconcile(sandbox, backend_of(sandbox))
    rows = _sessions(sandbox).select_related("sandbox", "opened_by").order_by("name")
    return [SessionResult.from_model(row) for row in rows]


@audited("session.close", "sandbox")
def close_session(principal: Principal, sandbox_id: str, name: str) -> SessionResult:
    """End a shell session: its shell and what it started. The next command with its name
    starts a new one in /workspace."""
    current().target("sandbox", sandbox_id)
    sandbox = access.get_sandbox(principal, sandbox_id, WRITE, "close shell sessions")
    name = session_name(name)
    current().details["session"] = name
    row = _sessions(sandbox).select_related("sandbox", "opened_by").filter(name=name).first()
    if row is None:
        raise NotFound(f"shell session {name} not found in sandbox {sandbox_id}")
    if sandbox.status == SandboxStatus.RUNNING:
        with backend_errors(sandbox, "close the shell session"):
            backend_of(sandbox).close_terminal(sandbox.backend_state, row.backend_id)
    with change():
        Terminal.objects.filter(pk=row.pk).close("closed")
    return SessionResult.from_model(row)


def _sessions(sandbox: Sandbox):
    return Terminal.objects.open().filter(sandbox=sandbox, kind=TerminalKind.SHELL)
