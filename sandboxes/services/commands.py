"""Commands: run a shell command, Python, pip; the sandbox's command history."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

from django.utils import timezone

from dbkit import writes
from hosts.backends.base import BackendError, ExecResult, OutputCallback, SandboxGone, StdinPipe
from sandboxes.contract.errors import BackendFailure, Conflict, InvalidInput, NotFound
from sandboxes.contract.results import CommandResult
from sandboxes.housekeeping import liveness, transitions
from sandboxes.metrics import instruments
from sandboxes.models import CommandExecution, CommandStatus, Sandbox
from sandboxes.policy import access, validation
from sandboxes.policy.access import READ, WRITE
from sandboxes.services import masking, pip, shells
from sandboxes.services.common import backend_of, decode_output, mark_lost, running_sandbox, touch
from tenants.auditing import AUDIT_VIEW, audited, change_with, current
from tenants.principal import Principal


@audited("command.run", "sandbox")
def run_command(
    principal: Principal,
    sandbox_id: str,
    command: str,
    *,
    cwd: str = validation.WORKSPACE,
    env: dict[str, str] | None = None,
    timeout: float | None = None,
    output_cap: int | None = None,
    on_output: OutputCallback | None = None,
    once: bool = False,
    session: str | None = None,
    stdin: str | None = None,
    on_start: Callable[[int], None] | None = None,
    stdin_pipe: StdinPipe | None = None,
) -> CommandResult:
    """Run a shell command (bash -c) and wait for it; a timeout kills it in the sandbox.

    once: the sandbox goes right after this command (run_once; see SandboxBackend.exec).
    session: run it in the long-lived shell of that name (shells.py; cwd is the session's
    own then). stdin: text given to its standard input (at most shells.MAX_STDIN_BYTES).
    on_start: called with the command's history id once it is recorded and about to run (a
    caller that must name the command while it runs: kill_command takes that id).
    stdin_pipe: its input as another thread writes it (StdinPipe: write, then close for the
    end of input); not with `stdin` or `session`, and only where the sandbox agent runs."""
    command = validation.command(command)
    if stdin_pipe is not None and (stdin is not None or session is not None):
        raise InvalidInput("input as it comes goes with neither stdin text nor a shell session")
    if session is not None:
        session = shells.session_name(session)
        current().details["session"] = session
    return _execute(
        principal,
        sandbox_id,
        ["bash", "-c", command],
        command,
        "command",
        cwd=cwd,
        env=env,
        timeout=timeout,
        output_cap=output_cap,
        on_output=on_output,
        once=once,
        session=session,
        stdin=stdin_pipe if stdin_pipe is not None else shells.stdin_bytes(stdin),
        on_start=on_start,
    )


@audited("command.python", "sandbox")
def run_python(
    principal: Principal,
    sandbox_id: str,
    code: str,
    *,
    cwd: str = validation.WORKSPACE,
    env: dict[str, str] | None = None,
    timeout: float | None = None,
    output_cap: int | None = None,
    on_output: OutputCallback | None = None,
) -> CommandResult:
    """Run Python source with the sandbox's python3."""
    code = validation.command(code, "code")
    return _execute(
        principal,
        sandbox_id,
        ["python3", "-c", code],
        code,
        "python",
        cwd=cwd,
        env=env,
        timeout=timeout,
        output_cap=output_cap,
        on_output=on_output,
    )


@audited("command.install", "sandbox")
def install_packages(
    principal: Principal,
    sandbox_id: str,
    packages: list[str] | str,
    *,
    index_url: str | None = None,
    timeout: float | None = None,
    on_output: OutputCallback | None = None,
) -> CommandResult:
    """pip install --user the given requirements (no shell: each is one argument)."""
    requirements = validation.packages(packages)
    argv = ["python3", "-m", "pip", "install", "--user", "--no-input", "--progress-bar", "off"]
    if index_url is not None:
        if not isinstance(index_url, str) or not index_url.startswith(("http://", "https://")):
            raise InvalidInput("index_url must be an http(s) URL")
        argv += ["--index-url", validation.no_nul(index_url, "index_url")]
    argv += requirements
    current().target("sandbox", sandbox_id)
    sandbox = access.get_sandbox(principal, sandbox_id, WRITE, "run commands")
    mask = masking.masker(sandbox.team_id)  # a requirement may carry a URL's credential
    current().details["packages"] = [mask.text(requirement) for requirement in requirements]
    pip.refuse_without_network(sandbox, index_url)  # before pip retries its way to a riddle
    return _execute(
        principal,
        sandbox_id,
        argv,
        "pip install " + " ".join(requirements),
        "pip",
        timeout=timeout if timeout is not None else 600,
        on_output=on_output,
        explain=lambda result: pip.with_network_hint(sandbox, index_url, result),
    )


def _execute(
    principal: Principal,
    sandbox_id: str,
    argv: list[str],
    display: str,
    kind: str,
    *,
    cwd: str = validation.WORKSPACE,
    env: dict[str, str] | None = None,
    timeout: float | None = None,
    output_cap: int | None = None,
    on_output: OutputCallback | None = None,
    once: bool = False,
    explain: Callable[[ExecResult], ExecResult] | None = None,
    session: str | None = None,
    stdin: bytes | StdinPipe | None = None,
    on_start: Callable[[int], None] | None = None,
) -> CommandResult:
    """explain: adds what the result alone does not say (pip's network errors)."""
    current().target("sandbox", sandbox_id)
    cwd = validation.path(cwd, "cwd")
    exec_env = validation.env(env)
    seconds = validation.timeout(timeout)
    cap = validation.output_cap(output_cap)
    sandbox = running_sandbox(principal, sandbox_id, WRITE, "run commands")
    # A stored secret's value in the command or its output is recorded and returned masked.
    mask = masking.masker(sandbox.team_id)
    recorded = mask.text(display)  # what is run stays as given
    live = masking.masked_output(on_output, mask)
    marker = uuid.uuid4().hex

    execution = CommandExecution.objects.create(
        sandbox=sandbox,
        actor=principal.user,
        channel=principal.channel,
        kind=kind,
        command=recorded,
        cwd=cwd,
        session=session or "",
        timeout_seconds=seconds,
        status=CommandStatus.RUNNING,
        started_at=timezone.now(),
        lease_id=liveness.current_lease_id(),  # closed at once if this process dies
        # Its processes' name in the sandbox, so that kill_command ends it from anywhere.
        background_state={"marker": marker} if session is None else {},
    )
    current().details.update({"command_id": execution.pk, "command": recorded[:500]})
    refuse_if_paused_meanwhile(execution, sandbox)
    if on_start is not None:
        on_start(execution.pk)
    started = time.monotonic()
    try:
        if session is not None:
            result = shells.run_in_session(
                principal,
                sandbox,
                session,
                display,
                env={**sandbox.env, **exec_env},
                timeout=seconds,
                output_cap=cap,
                on_output=live,
                stdin=stdin if isinstance(stdin, bytes) else None,  # run_command refuses a pipe
            )
        else:
            result = backend_of(sandbox).exec(
                sandbox.backend_state,
                argv,
                cwd=cwd,
                env={**sandbox.env, **exec_env},
                timeout=seconds,
                output_cap=cap,
                on_output=live,
                stdin=stdin,
                once=once,
                marker=marker,
            )
    except BackendError as exc:
        fail_execution(execution, sandbox, exc, time.monotonic() - started)
        instruments.command_finished(
            _kind_of(sandbox), CommandStatus.ERROR, time.monotonic() - started
        )
        raise BackendFailure(f"command could not run in sandbox {sandbox_id}: {exc}") from exc
    finally:
        if live is not None:
            live.flush()  # what it held back, in case a value began there
    finished = _finished(execution, explain(result) if explain else result, mask)
    instruments.command_finished(_kind_of(sandbox), execution.status, time.monotonic() - started)
    current().details.update({"status": execution.status, "exit_code": execution.exit_code})
    # The command's record and its audit row, in one transaction that holds the write lock
    # only for the two statements (dbkit/writes.py).
    still_running = CommandExecution.objects.filter(pk=execution.pk, status=CommandStatus.RUNNING)
    change_with(writes.update(still_running, finished))
    refuse_if_closed_meanwhile(execution)
    touch(sandbox)
    return CommandResult.from_model(execution)


def _kind_of(sandbox: Sandbox) -> str:
    host = sandbox.host  # loaded already: the command ran there
    return host.kind if host is not None else "none"  # the metric's backend label


def _status_of(result: ExecResult) -> str:
    if result.timed_out:
        return CommandStatus.TIMED_OUT
    return CommandStatus.SUCCEEDED if result.exit_code == 0 else CommandStatus.FAILED


# What finishing a command changes: only these are written (not the command text again).
_FINISHED_FIELDS = [
    "status",
    "exit_code",
    "stdout",
    "stderr",
    "stdout_truncated",
    "stderr_truncated",
    "stdout_bytes",
    "stderr_bytes",
    "duration_seconds",
    "finished_at",
    "error_message",
]


_FAILED_FIELDS = ["status", "error_message", "duration_seconds", "finished_at"]


def _finished(
    execution: CommandExecution, result: ExecResult, mask: masking.Masker
) -> dict[str, Any]:
    """What finishing the command changes (set on `execution` too), to be written."""
    execution.status = _status_of(result)
    execution.exit_code = result.exit_code
    execution.stdout = mask.text(decode_output(result.stdout))
    execution.stderr = mask.text(decode_output(result.stderr))
    execution.stdout_truncated = result.stdout_truncated
    execution.stderr_truncated = result.stderr_truncated
    execution.stdout_bytes = result.stdout_bytes
    execution.stderr_bytes = result.stderr_bytes
    execution.duration_seconds = result.duration_seconds
    execution.finished_at = timezone.now()
    if result.timed_out:
        execution.error_message = f"timed out after {execution.timeout_seconds:g} s"
    return {name: getattr(execution, name) for name in _FINISHED_FIELDS}


def refuse_if_paused_meanwhile(execution: CommandExecution, sandbox: Sandbox) -> None:
    """A pause or stop may have claimed the sandbox between its read and this command's row:
    then the command does not run (a frozen sandbox would hold it to its timeout). The claim
    checks for running rows, this for the claim: one of the two sees the other."""
    if transitions.still_running(sandbox):
        return
    execution.status = CommandStatus.ERROR
    execution.error_message = "not run: the sandbox was being paused or stopped"
    execution.finished_at = timezone.now()
    execution.save(update_fields=["status", "error_message", "finished_at"])
    raise Conflict(
        f"sandbox {sandbox.public_id} is being paused or stopped; the command did not run "
        "(run it again: it resumes the sandbox)"
    )


def refuse_if_closed_meanwhile(execution: CommandExecution) -> None:
    """This process stopped past its liveness lease (paused, cut off from the database) and
    its row was closed as abandoned: the closed row stays as it is (a final state is final),
    and the caller learns what happened rather than a result the history contradicts."""
    if liveness.surely_held(execution.lease_id):
        return
    stored = CommandExecution.objects.filter(pk=execution.pk).values_list("status", "error_message")
    status, message = stored.first() or (CommandStatus.ERROR, "deleted")
    if status == execution.status and message == execution.error_message:
        return
    raise Conflict(
        f"command {execution.pk} ended ({execution.status}, exit code {execution.exit_code}) "
        f"after its record had been closed: {message}. This platform process had stopped "
        "renewing its liveness lease (paused or cut off from the database); the record "
        "keeps the error"
    )


def fail_execution(
    execution: CommandExecution, sandbox: Sandbox, exc: BackendError, elapsed: float
) -> None:
    """Record a command the backend could not run; a vanished sandbox is marked lost."""
    execution.status = CommandStatus.ERROR
    execution.error_message = str(exc)[:2000]
    execution.duration_seconds = elapsed
    execution.finished_at = timezone.now()
    # Unless closed meanwhile (its process taken for dead: housekeeping/liveness.py).
    CommandExecution.objects.filter(
        pk=execution.pk, status__in=(CommandStatus.RUNNING, CommandStatus.QUEUED)
    ).update(**{f: getattr(execution, f) for f in _FAILED_FIELDS})
    if isinstance(exc, SandboxGone):
        mark_lost(sandbox, str(exc))


@audited("command.list", "sandbox", kind=AUDIT_VIEW)
def list_commands(principal: Principal, sandbox_id: str, *, limit: int = 50) -> list[CommandResult]:
    """The sandbox's most recent commands, newest first."""
    current().target("sandbox", sandbox_id)
    validation.positive_int(limit, "limit", minimum=1, maximum=500)
    sandbox = access.get_sandbox(principal, sandbox_id, READ, "see command history")
    executions = sandbox.commands.select_related("sandbox", "actor")[:limit]
    return [CommandResult.from_model(e) for e in executions]


@audited("command.get", "command", kind=AUDIT_VIEW)
def get_command(principal: Principal, command_id: int) -> CommandResult:
    current().target("command", command_id)
    validation.positive_int(command_id, "command id", minimum=1)
    access.require(principal, READ, "see command history")
    visible = access.sandboxes_of(principal)
    execution = (
        CommandExecution.objects.select_related("sandbox", "actor")
        .filter(pk=command_id, sandbox__in=visible)
        .first()
    )
    if execution is None:
        raise NotFound(f"command {command_id} not found")
    return CommandResult.from_model(execution)
