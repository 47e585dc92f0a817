"""The one API every interface (web, REST, MCP, admin, tasks) calls.

Each function takes the acting principal first, then: authorizes (the sandbox belongs to the
principal's team, the role allows it, quotas hold), calls the host's backend, persists
history (one CommandExecution per command) and leaves one AuditLog row (the `audited`
decorator), and returns a plain result object. Another team's sandbox is "not found".
"""

from __future__ import annotations

import itertools
import logging
import secrets
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django_q.tasks import async_task

from hosts.backends.base import (
    BackendError,
    ExecResult,
    FileEntry,
    JobStatus,
    OutputCallback,
    SandboxGone,
    SandboxSpec,
)
from hosts.models import Host, Image
from sandboxes import access, lifecycle, placement, pool, tarballs, validation
from sandboxes.access import READ, WRITE
from sandboxes.auditing import audited, current
from sandboxes.errors import (
    BackendFailure,
    Conflict,
    InvalidInput,
    NotFound,
    PermissionDenied,
    QuotaExceeded,
)
from sandboxes.limits import DEFAULT_CPUS, DEFAULT_MEMORY_MB, DEFAULT_PIDS_LIMIT, MIN_MEMORY_MB
from sandboxes.models import (
    CommandExecution,
    CommandStatus,
    Sandbox,
    SandboxStatus,
)
from sandboxes.results import (
    BackgroundCheck,
    CommandResult,
    FileContent,
    HostInfo,
    SandboxInfo,
    UploadFile,
    UploadResult,
)
from tenants.models import Team
from tenants.principal import Principal

READ_FILE_MAX_BYTES = 4 * 1024 * 1024


# --- sandboxes -------------------------------------------------------------------------------


@audited("sandbox.create", "sandbox")
def create_sandbox(
    principal: Principal,
    *,
    image: str | None = None,
    name: str | None = None,
    cpus: float | None = None,
    memory_mb: int | None = None,
    env: dict[str, str] | None = None,
    lifetime_minutes: int | None = None,
    network: bool | None = None,
) -> SandboxInfo:
    """Create a sandbox on the idlest host with room and wait until it is running."""
    access.require(principal, WRITE, "create sandboxes")
    team = _team(principal)
    chosen_image = _image_for(team, image)
    limits = _limits(team, cpus, memory_mb, network)
    lifetime = _lifetime(team, lifetime_minutes)
    spec_env = validation.env(env)
    sandbox_name = validation.name(name)

    with transaction.atomic():
        # Lock the team row so concurrent creations cannot both pass the quota check.
        team = Team.objects.select_for_update().get(pk=team.pk)
        _check_running_quota(team)
        host = placement.choose_host(team)
        sandbox = Sandbox.objects.create(
            team=team,
            owner=principal.user,
            host=host,
            image=chosen_image,
            name=sandbox_name,
            env=spec_env,
            expires_at=timezone.now() + timedelta(minutes=lifetime),
            **limits,
        )
    current().target("sandbox", sandbox.public_id)
    current().details.update({"image": chosen_image.name, "host": host.name, **limits})
    _provision(sandbox)
    return SandboxInfo.from_model(sandbox)


def _team(principal: Principal) -> Team:
    if principal.team is None:
        raise InvalidInput("a team is needed to create a sandbox")
    return principal.team


def _image_for(team: Team, name: str | None) -> Image:
    if name is None or name == "":
        chosen = Image.objects.filter(is_default=True).first()
        if chosen is None:
            raise InvalidInput("no default image is configured; name an image")
    else:
        if not isinstance(name, str):
            raise InvalidInput("image must be a string")
        chosen = Image.objects.filter(name=name).first()
        if chosen is None or not chosen.allowed_for(team):
            available = ", ".join(i.name for i in Image.objects.all() if i.allowed_for(team))
            raise InvalidInput(f"unknown image {name!r}; available: {available or 'none'}")
    return chosen


def _limits(team: Team, cpus: Any, memory_mb: Any, network: Any) -> dict[str, Any]:
    cpus = min(DEFAULT_CPUS, team.max_cpus_per_sandbox) if cpus is None else cpus
    if isinstance(cpus, bool) or not isinstance(cpus, int | float) or cpus <= 0:
        raise InvalidInput("cpus must be a positive number")
    if cpus > team.max_cpus_per_sandbox:
        raise QuotaExceeded(f"team quota: at most {team.max_cpus_per_sandbox:g} cpus per sandbox")
    memory_mb = (
        min(DEFAULT_MEMORY_MB, team.max_memory_mb_per_sandbox) if memory_mb is None else memory_mb
    )
    validation.positive_int(memory_mb, "memory_mb", minimum=MIN_MEMORY_MB)
    if memory_mb > team.max_memory_mb_per_sandbox:
        raise QuotaExceeded(
            f"team quota: at most {team.max_memory_mb_per_sandbox} MB of memory per sandbox"
        )
    network = team.allow_network if network is None else network
    if not isinstance(network, bool):
        raise InvalidInput("network must be true or false")
    if network and not team.allow_network:
        raise PermissionDenied(f"team {team.slug} may not give sandboxes network access")
    return {
        "cpus": float(cpus),
        "memory_mb": memory_mb,
        "pids_limit": DEFAULT_PIDS_LIMIT,
        "network": network,
    }


def _lifetime(team: Team, minutes: Any) -> int:
    if minutes is None:
        return min(team.default_lifetime_minutes, team.max_lifetime_minutes)
    validation.positive_int(minutes, "lifetime_minutes", minimum=1)
    if minutes > team.max_lifetime_minutes:
        raise QuotaExceeded(
            f"team quota: sandboxes live at most {team.max_lifetime_minutes} minutes"
        )
    return minutes


def _check_running_quota(team: Team) -> None:
    running = Sandbox.objects.filter(team=team).live().count()
    if running >= team.max_running_sandboxes:
        raise QuotaExceeded(
            f"team quota: at most {team.max_running_sandboxes} running sandboxes "
            f"({running} running); delete one first"
        )


def _provision(sandbox: Sandbox) -> None:
    """Start the sandbox on its host; on failure leave nothing behind and say why."""
    sandbox.transition(SandboxStatus.STARTING)
    sandbox.save(update_fields=["status", "status_message"])
    spec = SandboxSpec(
        sandbox_id=sandbox.public_id,
        image_reference=sandbox.image.reference,
        cpus=sandbox.cpus,
        memory_mb=sandbox.memory_mb,
        pids_limit=sandbox.pids_limit,
        network=sandbox.network,
        env=sandbox.env,
        labels={"org.sandhub.team": sandbox.team.slug},
    )
    try:
        # A warm-pool member when one fits (sandboxes/pool.py), else a fresh container.
        sandbox.backend_state = pool.provision_sandbox(sandbox, spec)
    except BackendError as exc:
        # The backend removed what it had made; the row stays only as history.
        sandbox.transition(SandboxStatus.ERROR, f"provisioning failed: {exc}")
        sandbox.transition(SandboxStatus.STOPPING)
        sandbox.transition(SandboxStatus.DELETED, f"provisioning failed: {exc}")
        sandbox.save()
        raise BackendFailure(f"could not start the sandbox on host {sandbox.host}: {exc}") from exc
    sandbox.transition(SandboxStatus.RUNNING)
    sandbox.last_activity_at = timezone.now()
    sandbox.save()


@audited("sandbox.list", "sandbox")
def list_sandboxes(principal: Principal) -> list[SandboxInfo]:
    access.require(principal, READ, "list sandboxes")
    return [SandboxInfo.from_model(s) for s in access.sandboxes_of(principal)]


@audited("sandbox.get", "sandbox")
def get_sandbox(principal: Principal, sandbox_id: str) -> SandboxInfo:
    current().target("sandbox", sandbox_id)
    sandbox = access.get_sandbox(principal, sandbox_id, READ, "see sandboxes")
    return SandboxInfo.from_model(sandbox)


@audited("sandbox.delete", "sandbox")
def delete_sandbox(principal: Principal, sandbox_id: str) -> SandboxInfo:
    """Remove the sandbox and everything it stored; its history stays."""
    current().target("sandbox", sandbox_id)
    sandbox = access.get_sandbox(principal, sandbox_id, WRITE, "delete sandboxes")
    if sandbox.status == SandboxStatus.PENDING:
        sandbox.transition(SandboxStatus.DELETED)
        sandbox.save()
        return SandboxInfo.from_model(sandbox)
    sandbox.transition(SandboxStatus.STOPPING)
    sandbox.save(update_fields=["status", "status_message"])
    try:
        if sandbox.host and sandbox.backend_state:
            sandbox.host.backend().destroy(sandbox.backend_state)
    except BackendError as exc:
        sandbox.transition(SandboxStatus.ERROR, f"delete failed: {exc}")
        sandbox.save(update_fields=["status", "status_message"])
        raise BackendFailure(f"could not delete sandbox {sandbox_id}: {exc}") from exc
    sandbox.transition(SandboxStatus.DELETED)
    sandbox.save()
    return SandboxInfo.from_model(sandbox)


@audited("sandbox.rename", "sandbox")
def rename_sandbox(principal: Principal, sandbox_id: str, name: str) -> SandboxInfo:
    current().target("sandbox", sandbox_id)
    new_name = validation.name(name)
    sandbox = access.get_sandbox(principal, sandbox_id, WRITE, "rename sandboxes")
    current().details.update({"from": sandbox.name, "to": new_name})
    sandbox.name = new_name
    sandbox.save(update_fields=["name"])
    return SandboxInfo.from_model(sandbox)


# --- commands --------------------------------------------------------------------------------


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
) -> CommandResult:
    """Run a shell command (bash -c) and wait for it; a timeout kills it in the sandbox."""
    command = validation.command(command)
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
    current().details["packages"] = requirements
    return _execute(
        principal,
        sandbox_id,
        argv,
        "pip install " + " ".join(requirements),
        "pip",
        timeout=timeout if timeout is not None else 600,
        on_output=on_output,
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
) -> CommandResult:
    current().target("sandbox", sandbox_id)
    cwd = validation.path(cwd, "cwd")
    exec_env = validation.env(env)
    seconds = validation.timeout(timeout)
    cap = validation.output_cap(output_cap)
    sandbox = access.get_sandbox(principal, sandbox_id, WRITE, "run commands")
    _require_running(sandbox)

    execution = CommandExecution.objects.create(
        sandbox=sandbox,
        actor=principal.user,
        channel=principal.channel,
        kind=kind,
        command=display,
        cwd=cwd,
        timeout_seconds=seconds,
        status=CommandStatus.RUNNING,
        started_at=timezone.now(),
    )
    current().details.update({"command_id": execution.pk, "command": display[:500]})
    started = time.monotonic()
    try:
        result = sandbox.host.backend().exec(
            sandbox.backend_state,
            argv,
            cwd=cwd,
            env={**sandbox.env, **exec_env},
            timeout=seconds,
            output_cap=cap,
            on_output=on_output,
        )
    except BackendError as exc:
        _fail_execution(execution, sandbox, exc, time.monotonic() - started)
        raise BackendFailure(f"command could not run in sandbox {sandbox_id}: {exc}") from exc
    _finish_execution(execution, result)
    _touch(sandbox)
    current().details.update({"status": execution.status, "exit_code": execution.exit_code})
    return CommandResult.from_model(execution)


def _require_running(sandbox: Sandbox) -> None:
    if sandbox.status != SandboxStatus.RUNNING:
        raise Conflict(f"sandbox {sandbox.public_id} is {sandbox.status}, not running")


def _status_of(result: ExecResult) -> str:
    if result.timed_out:
        return CommandStatus.TIMED_OUT
    return CommandStatus.SUCCEEDED if result.exit_code == 0 else CommandStatus.FAILED


def decode_output(data: bytes) -> str:
    """Text as faithful as a database column allows: invalid UTF-8 and NUL as \\x escapes."""
    return data.decode("utf-8", errors="backslashreplace").replace("\x00", "\\x00")


def _finish_execution(execution: CommandExecution, result: ExecResult) -> None:
    execution.status = _status_of(result)
    execution.exit_code = result.exit_code
    execution.stdout = decode_output(result.stdout)
    execution.stderr = decode_output(result.stderr)
    execution.stdout_truncated = result.stdout_truncated
    execution.stderr_truncated = result.stderr_truncated
    execution.stdout_bytes = result.stdout_bytes
    execution.stderr_bytes = result.stderr_bytes
    execution.duration_seconds = result.duration_seconds
    execution.finished_at = timezone.now()
    if result.timed_out:
        execution.error_message = f"timed out after {execution.timeout_seconds:g} s"
    execution.save()


def _fail_execution(
    execution: CommandExecution, sandbox: Sandbox, exc: BackendError, elapsed: float
) -> None:
    execution.status = CommandStatus.ERROR
    execution.error_message = str(exc)[:2000]
    execution.duration_seconds = elapsed
    execution.finished_at = timezone.now()
    execution.save()
    if isinstance(exc, SandboxGone):
        _mark_lost(sandbox, str(exc))


def _mark_lost(sandbox: Sandbox, message: str) -> None:
    sandbox.transition(SandboxStatus.LOST, message)
    sandbox.save(update_fields=["status", "status_message"])


def _touch(sandbox: Sandbox) -> None:
    Sandbox.objects.filter(pk=sandbox.pk).update(last_activity_at=timezone.now())


@audited("command.list", "sandbox")
def list_commands(principal: Principal, sandbox_id: str, *, limit: int = 50) -> list[CommandResult]:
    """The sandbox's most recent commands, newest first."""
    current().target("sandbox", sandbox_id)
    validation.positive_int(limit, "limit", minimum=1, maximum=500)
    sandbox = access.get_sandbox(principal, sandbox_id, READ, "see command history")
    executions = sandbox.commands.select_related("sandbox", "actor")[:limit]
    return [CommandResult.from_model(e) for e in executions]


@audited("command.get", "command")
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


# --- background commands ---------------------------------------------------------------------
# start_background starts the command detached in the sandbox (the backend's job: a session of
# its own, a log file and an exit-code file in the sandbox) and returns at once with the
# CommandExecution id as the task id. sandboxes/tasks.py supervises it through
# `background_tick`: polls it, kills it past its maximum runtime, records its end.
# check_background and cancel_background act on the sandbox live, so they answer right even
# while no worker runs. Whichever of them sees the end first records it, once (a conditional
# update on status=running), and the others leave it be.

logger = logging.getLogger(__name__)

BACKGROUND_TAIL_BYTES = 64 * 1024  # read for a check; the final record keeps up to the cap
MAX_TAIL_LINES = 10_000
MAX_BACKGROUND_PER_SANDBOX = 10
# The sandbox kills a job at its maximum runtime itself (coreutils timeout); the supervisor
# kills it this long after, in case that did not happen (a job that escaped its group, ...).
BACKGROUND_KILL_GRACE_SECONDS = 5.0
_ACTIVITY_EVERY = timedelta(seconds=30)  # how often a running job refreshes last_activity_at


@audited("command.background.start", "sandbox")
def start_background(
    principal: Principal,
    sandbox_id: str,
    command: str,
    *,
    cwd: str = validation.WORKSPACE,
    env: dict[str, str] | None = None,
    max_runtime_seconds: float | None = None,
) -> CommandResult:
    """Start a shell command (bash -c) detached in the sandbox and return at once.

    The result's id is the task id for check_background / cancel_background. The command is
    killed inside the sandbox after max_runtime_seconds (default: the platform's maximum).
    """
    current().target("sandbox", sandbox_id)
    command = validation.command(command)
    cwd = validation.path(cwd, "cwd")
    exec_env = validation.env(env)
    max_runtime = validation.timeout(
        settings.SANDHUB_MAX_TIMEOUT_SECONDS
        if max_runtime_seconds is None
        else max_runtime_seconds,
        "max_runtime_seconds",
    )
    sandbox = access.get_sandbox(principal, sandbox_id, WRITE, "run commands")
    _require_running(sandbox)
    _check_background_limit(sandbox)
    execution = CommandExecution.objects.create(
        sandbox=sandbox,
        actor=principal.user,
        channel=principal.channel,
        kind="command",
        command=command,
        cwd=cwd,
        timeout_seconds=max_runtime,
        status=CommandStatus.QUEUED,
        background=True,
        started_at=timezone.now(),
    )
    current().details.update(
        {"command_id": execution.pk, "command": command[:500], "max_runtime_seconds": max_runtime}
    )
    # Unique within the sandbox even if ids restart (a restored database): it names the
    # job's directory and marks its processes.
    job_id = f"{execution.pk}-{secrets.token_hex(4)}"
    try:
        job = sandbox.host.backend().start_background(
            sandbox.backend_state,
            ["bash", "-c", command],
            cwd=cwd,
            env={**sandbox.env, **exec_env},
            job_id=job_id,
            timeout=max_runtime,
        )
    except BackendError as exc:
        _fail_execution(execution, sandbox, exc, 0.0)
        raise BackendFailure(f"command could not start in sandbox {sandbox_id}: {exc}") from exc
    execution.status = CommandStatus.RUNNING
    execution.background_state = {"job": job}
    execution.save(update_fields=["status", "background_state"])
    pk = execution.pk
    # After commit, so the worker finds the row (a caller may hold a transaction open).
    transaction.on_commit(
        lambda: async_task(
            "sandboxes.tasks.supervise_background", pk, task_name=f"supervise-background-{pk}"
        )
    )
    _touch(sandbox)
    current().details.update({"status": execution.status, "log": job.get("log", "")})
    return CommandResult.from_model(execution)


def _check_background_limit(sandbox: Sandbox) -> None:
    running = sandbox.commands.filter(
        background=True, status__in=[CommandStatus.QUEUED, CommandStatus.RUNNING]
    ).count()
    if running >= MAX_BACKGROUND_PER_SANDBOX:
        raise QuotaExceeded(
            f"at most {MAX_BACKGROUND_PER_SANDBOX} background commands run at once in a "
            f"sandbox ({running} running); wait for one or cancel it"
        )


@audited("command.background.check", "sandbox")
def check_background(
    principal: Principal, sandbox_id: str, command_id: int, *, tail_lines: int = 50
) -> BackgroundCheck:
    """Running or not, exit code, the last tail_lines lines of output, elapsed time.

    Reads the sandbox live while the command runs (and records its end if it came).
    """
    current().target("sandbox", sandbox_id)
    validation.positive_int(command_id, "command id", minimum=1)
    validation.positive_int(tail_lines, "tail_lines", minimum=0, maximum=MAX_TAIL_LINES)
    sandbox = access.get_sandbox(principal, sandbox_id, READ, "see background commands")
    execution = _background_execution(sandbox, command_id)
    live = None
    if execution.status == CommandStatus.RUNNING:
        tail = BACKGROUND_TAIL_BYTES if tail_lines else 0
        try:
            live = _observe(execution, sandbox, tail)
        except BackendError as exc:
            raise BackendFailure(
                f"could not check command {command_id} in sandbox {sandbox_id}: {exc}"
            ) from exc
    _touch(sandbox)
    check = _background_check(execution, live, tail_lines)
    current().details.update({"command_id": execution.pk, "status": check.status})
    return check


@audited("command.background.cancel", "sandbox")
def cancel_background(principal: Principal, sandbox_id: str, command_id: int) -> BackgroundCheck:
    """Kill every process of the command (SIGTERM, SIGKILL 2 s later) and record it cancelled.

    Cancelling a command that has already ended changes nothing and says how it ended.
    """
    current().target("sandbox", sandbox_id)
    validation.positive_int(command_id, "command id", minimum=1)
    sandbox = access.get_sandbox(principal, sandbox_id, WRITE, "cancel commands")
    execution = _background_execution(sandbox, command_id)
    current().details.update({"command_id": execution.pk, "was": execution.status})
    live = None
    if execution.status == CommandStatus.RUNNING:
        try:
            live = _kill_and_record(execution, sandbox, BACKGROUND_TAIL_BYTES)
        except BackendError as exc:
            raise BackendFailure(
                f"could not cancel command {command_id} in sandbox {sandbox_id}: {exc}"
            ) from exc
    _touch(sandbox)
    check = _background_check(execution, live, 50)
    current().details["status"] = check.status
    return check


def background_tick(principal: Principal, command_id: int) -> bool:
    """One look at a running background command, for its supervisor (sandboxes.tasks).

    Records the end if it came, kills the command once it is past its maximum runtime, keeps
    its sandbox active while it runs. True when nothing is left to supervise. A host that does
    not answer is not an end: the next look tries again (the sandbox enforces the maximum
    runtime on its own meanwhile). No audit row: it runs every second or two.
    """
    if not access.is_platform_admin(principal):
        raise PermissionDenied("only the system supervises background commands")
    execution = (
        CommandExecution.objects.select_related("sandbox__host").filter(pk=command_id).first()
    )
    if execution is None or execution.status != CommandStatus.RUNNING:
        return True
    sandbox = execution.sandbox
    if sandbox.status != SandboxStatus.RUNNING:
        # Deleted, lost or being deleted: the job went (or is going) with its container.
        _record_background_end(
            execution, CommandStatus.ERROR, f"the sandbox is {sandbox.status}; the command ended"
        )
        return True
    try:
        if _overdue(execution):
            # Kill before looking: a job that has used up the pids limit cannot be polled,
            # but the kill gets in (and one that ended meanwhile is recorded as it ended).
            _kill_and_record(execution, sandbox, 0)
            return True
        status = _poll(execution, sandbox, 0)
        if status.running:
            _keep_active(sandbox)
            return False
        _record_from_status(execution, sandbox, status)
        return True
    except SandboxGone:
        return True  # _poll recorded it
    except BackendError as exc:
        logger.warning("background command %s: %s; trying again", command_id, exc)
        return False


def _background_execution(sandbox: Sandbox, command_id: int) -> CommandExecution:
    execution = (
        sandbox.commands.select_related("sandbox", "actor")
        .filter(pk=command_id, background=True)
        .first()
    )
    if execution is None:
        raise NotFound(f"background command {command_id} not found in sandbox {sandbox.public_id}")
    return execution


def _job(execution: CommandExecution) -> dict[str, Any]:
    return (execution.background_state or {}).get("job") or {}


def _poll(execution: CommandExecution, sandbox: Sandbox, tail_bytes: int) -> JobStatus:
    """The job as the sandbox sees it; a vanished container ends the command (and sandbox)."""
    try:
        return sandbox.host.backend().poll_background(
            sandbox.backend_state, _job(execution), tail_bytes
        )
    except SandboxGone as exc:
        _vanished(execution, sandbox, exc)
        raise


def _vanished(execution: CommandExecution, sandbox: Sandbox, exc: SandboxGone) -> None:
    _record_background_end(execution, CommandStatus.ERROR, f"the sandbox vanished: {exc}")
    if Sandbox.objects.filter(pk=sandbox.pk, status=SandboxStatus.RUNNING).exists():
        _mark_lost(sandbox, str(exc))


def _observe(execution: CommandExecution, sandbox: Sandbox, tail_bytes: int) -> JobStatus | None:
    """Poll a running command; record its end if it came. None when the sandbox vanished."""
    try:
        status = _poll(execution, sandbox, tail_bytes)
    except SandboxGone:
        return None
    if not status.running:
        _record_from_status(execution, sandbox, status)
    return status


def _kill_and_record(
    execution: CommandExecution, sandbox: Sandbox, tail_bytes: int
) -> JobStatus | None:
    backend = sandbox.host.backend()
    try:
        backend.cancel_background(sandbox.backend_state, _job(execution))
    except SandboxGone as exc:
        _vanished(execution, sandbox, exc)
        raise
    status = _poll(execution, sandbox, tail_bytes)
    _record_from_status(execution, sandbox, status)
    return status


def _overdue(execution: CommandExecution) -> bool:
    limit = execution.timeout_seconds + BACKGROUND_KILL_GRACE_SECONDS
    return _elapsed(execution) > limit


def _elapsed(execution: CommandExecution) -> float:
    if execution.started_at is None:
        return 0.0
    return (timezone.now() - execution.started_at).total_seconds()


def _record_from_status(execution: CommandExecution, sandbox: Sandbox, status: JobStatus) -> None:
    """Record the end the sandbox reports, with the log's tail up to the output cap."""
    status_name, message = _background_outcome(execution, status)
    final = status
    cap = settings.SANDHUB_OUTPUT_CAP_BYTES
    if len(status.output) < min(cap, status.output_bytes):
        try:
            final = sandbox.host.backend().poll_background(
                sandbox.backend_state, _job(execution), cap
            )
        except BackendError:
            final = status  # keep what we have rather than lose the end
    _record_background_end(
        execution,
        status_name,
        message,
        exit_code=status.exit_code,
        output=final.output,
        output_bytes=max(final.output_bytes, status.output_bytes),
        elapsed=status.elapsed_seconds,
    )


def _background_outcome(execution: CommandExecution, status: JobStatus) -> tuple[str, str]:
    """(status, message) from how the job ended; a kill at or past the maximum runtime is a
    timeout whoever did it (the sandbox's own timeout, or the supervisor as a backstop)."""
    elapsed = status.elapsed_seconds if status.elapsed_seconds is not None else _elapsed(execution)
    limit = execution.timeout_seconds
    timed_out = f"killed after its maximum runtime of {limit:g} s"
    if status.cancelled:
        if elapsed >= limit:
            return CommandStatus.TIMED_OUT, timed_out
        return CommandStatus.CANCELLED, "cancelled"
    if status.exit_code is None:
        return CommandStatus.ERROR, (
            "the command's processes vanished without an exit code (was the sandbox restarted?)"
        )
    if status.exit_code in (124, 137) and elapsed >= limit:
        return CommandStatus.TIMED_OUT, timed_out
    return (CommandStatus.SUCCEEDED if status.exit_code == 0 else CommandStatus.FAILED), ""


def _record_background_end(
    execution: CommandExecution,
    status: str,
    message: str,
    *,
    exit_code: int | None = None,
    output: bytes = b"",
    output_bytes: int = 0,
    elapsed: float | None = None,
) -> bool:
    """Store the end once: only a row still running changes. The row is refreshed either way."""
    now = timezone.now()
    if elapsed is None:
        elapsed = _elapsed(execution)
    updated = CommandExecution.objects.filter(pk=execution.pk, status=CommandStatus.RUNNING).update(
        status=status,
        exit_code=exit_code,
        stdout=decode_output(output),
        stderr="",
        stdout_bytes=output_bytes,
        stdout_truncated=output_bytes > len(output),
        stderr_bytes=0,
        stderr_truncated=False,
        duration_seconds=elapsed,
        finished_at=now,
        error_message=message[:2000],
    )
    execution.refresh_from_db()
    return updated == 1


def _keep_active(sandbox: Sandbox) -> None:
    """A running job keeps its sandbox active; one write per _ACTIVITY_EVERY, not per poll."""
    now = timezone.now()
    Sandbox.objects.filter(pk=sandbox.pk, last_activity_at__lt=now - _ACTIVITY_EVERY).update(
        last_activity_at=now
    )


def _background_check(
    execution: CommandExecution, live: JobStatus | None, tail_lines: int
) -> BackgroundCheck:
    running = execution.status == CommandStatus.RUNNING
    if running and live is not None:
        text, total = decode_output(live.output), live.output_bytes
        cut = total > len(live.output)
    else:
        text, total, cut = execution.stdout, execution.stdout_bytes, execution.stdout_truncated
    lines = text.splitlines(keepends=True)
    if cut and len(lines) > 1:
        lines = lines[1:]  # the first is the end of a longer line
    shown = lines[-tail_lines:] if tail_lines else []
    elapsed = _elapsed(execution) if running else execution.duration_seconds
    return BackgroundCheck(
        id=execution.pk,
        sandbox_id=execution.sandbox.public_id,
        command=execution.command,
        status=execution.status,
        running=running,
        exit_code=execution.exit_code if not running else None,
        output="".join(shown),
        output_truncated=cut or len(shown) < len(lines),
        output_bytes=total,
        elapsed_seconds=elapsed,
        max_runtime_seconds=execution.timeout_seconds,
        log_path=_job(execution).get("log", ""),
        error_message=execution.error_message,
        started_at=execution.started_at,
        finished_at=execution.finished_at,
    )


# --- files -----------------------------------------------------------------------------------


@audited("files.upload", "sandbox")
def upload_files(principal: Principal, sandbox_id: str, files: list[UploadFile]) -> UploadResult:
    """Write many files in one tar stream; relative paths are taken from /workspace."""
    current().target("sandbox", sandbox_id)
    prepared = _prepare_uploads(files)
    sandbox = access.get_sandbox(principal, sandbox_id, WRITE, "write files")
    _require_running(sandbox)
    _put(sandbox, prepared)
    paths = [path for path, _, _ in prepared]
    total = sum(len(content) for _, content, _ in prepared)
    current().details.update({"paths": paths[:50], "bytes": total})
    _touch(sandbox)
    return UploadResult(sandbox_id=sandbox.public_id, paths=paths, total_bytes=total)


@audited("files.write", "sandbox")
def write_file(
    principal: Principal, sandbox_id: str, path: str, content: bytes | str, *, mode: int = 0o644
) -> UploadResult:
    current().target("sandbox", sandbox_id)
    data = content.encode() if isinstance(content, str) else content
    prepared = _prepare_uploads([UploadFile(path=path, content=data, mode=mode)])
    sandbox = access.get_sandbox(principal, sandbox_id, WRITE, "write files")
    _require_running(sandbox)
    _put(sandbox, prepared)
    current().details.update({"path": prepared[0][0], "bytes": len(data)})
    _touch(sandbox)
    return UploadResult(sandbox_id=sandbox.public_id, paths=[prepared[0][0]], total_bytes=len(data))


def _prepare_uploads(files: Any) -> list[tuple[str, bytes, int]]:
    if not isinstance(files, list | tuple) or not files:
        raise InvalidInput("files must be a non-empty list")
    if len(files) > 1000:
        raise InvalidInput("at most 1000 files per upload")
    prepared: list[tuple[str, bytes, int]] = []
    total = 0
    for item in files:
        if not isinstance(item, UploadFile) or not isinstance(item.content, bytes | bytearray):
            raise InvalidInput("each file needs a path and bytes content")
        full = validation.path(item.path, "file path", under_workspace=True)
        if full == validation.WORKSPACE:
            raise InvalidInput("a file path must name a file inside /workspace")
        validation.positive_int(item.mode, "file mode", minimum=0, maximum=0o7777)
        total += len(item.content)
        prepared.append((full, bytes(item.content), item.mode))
    limit = settings.SANDHUB_MAX_TRANSFER_BYTES
    if total > limit:
        raise InvalidInput(f"upload of {total} bytes is over the {limit}-byte limit")
    return prepared


def _put(sandbox: Sandbox, prepared: list[tuple[str, bytes, int]]) -> None:
    archive = tarballs.build(prepared, validation.WORKSPACE)
    try:
        sandbox.host.backend().put_files(sandbox.backend_state, validation.WORKSPACE, archive)
    except BackendError as exc:
        if isinstance(exc, SandboxGone):
            _mark_lost(sandbox, str(exc))
        raise BackendFailure(
            f"could not write files in sandbox {sandbox.public_id}: {exc}"
        ) from exc


@audited("files.download", "sandbox")
def download_files(
    principal: Principal, sandbox_id: str, paths: list[str], *, max_bytes: int | None = None
) -> list[tuple[str, bytes]]:
    """Files (or every file under directories) as (absolute path, content), one tar each.

    At most max_bytes in all (default and ceiling: SANDHUB_MAX_TRANSFER_BYTES); the stream is
    refused as soon as it passes the limit, before more is read.
    """
    current().target("sandbox", sandbox_id)
    ceiling = settings.SANDHUB_MAX_TRANSFER_BYTES
    limit = ceiling if max_bytes is None else max_bytes
    validation.positive_int(limit, "max_bytes", minimum=1, maximum=ceiling)
    if isinstance(paths, str):
        paths = [paths]
    if not isinstance(paths, list) or not paths or len(paths) > 100:
        raise InvalidInput("paths must be a list of 1 to 100 paths")
    wanted = [validation.path(p) for p in paths]
    sandbox = access.get_sandbox(principal, sandbox_id, READ, "read files")
    _require_running(sandbox)
    result: list[tuple[str, bytes]] = []
    for path in wanted:
        stream = _get(sandbox, path)
        result += tarballs.files_in(stream, path, limit - sum(len(c) for _, c in result))
    current().details.update({"paths": wanted[:50], "files": len(result)})
    return result


@audited("files.stream", "sandbox")
def open_file_stream(principal: Principal, sandbox_id: str, path: str) -> Iterator[bytes]:
    """One file's content as a stream of chunks, never whole in memory (for HTTP downloads)."""
    current().target("sandbox", sandbox_id)
    full = validation.path(path)
    sandbox = access.get_sandbox(principal, sandbox_id, READ, "read files")
    _require_running(sandbox)
    current().details["path"] = full
    chunks = tarballs.first_file(_get(sandbox, full), full)
    # Read the first chunk here, so "is a directory" and engine errors are raised (and
    # audited) by this call rather than by whoever iterates the stream later.
    first = next(chunks, b"")
    return itertools.chain([first], chunks)


def _get(sandbox: Sandbox, path: str) -> Iterator[bytes]:
    try:
        return sandbox.host.backend().get_files(sandbox.backend_state, path)
    except FileNotFoundError as exc:
        raise NotFound(f"{path} not found in sandbox {sandbox.public_id}") from exc
    except BackendError as exc:
        if isinstance(exc, SandboxGone):
            _mark_lost(sandbox, str(exc))
        raise BackendFailure(
            f"could not read {path} in sandbox {sandbox.public_id}: {exc}"
        ) from exc


@audited("files.list", "sandbox")
def list_files(
    principal: Principal, sandbox_id: str, path: str = validation.WORKSPACE
) -> list[FileEntry]:
    current().target("sandbox", sandbox_id)
    full = validation.path(path)
    sandbox = access.get_sandbox(principal, sandbox_id, READ, "list files")
    _require_running(sandbox)
    current().details["path"] = full
    try:
        return sandbox.host.backend().list_dir(sandbox.backend_state, full)
    except FileNotFoundError as exc:
        raise NotFound(f"{full} not found in sandbox {sandbox_id}") from exc
    except BackendError as exc:
        raise BackendFailure(f"could not list {full} in sandbox {sandbox_id}: {exc}") from exc


# Size on stderr, the requested byte range on stdout: one round trip, binary-safe.
_NOT_A_FILE = 3
_READ_RANGE = (
    '[ -d "$1" ] && exit 3; stat -c %s -- "$1" >&2 && tail -c +"$2" -- "$1" | head -c "$3"'
)


@audited("files.read", "sandbox")
def read_file(
    principal: Principal,
    sandbox_id: str,
    path: str,
    *,
    offset: int = 0,
    max_bytes: int = 1024 * 1024,
) -> FileContent:
    """Up to max_bytes of a file from offset; says the file's size and whether that is all."""
    current().target("sandbox", sandbox_id)
    full = validation.path(path)
    validation.positive_int(offset, "offset", minimum=0)
    validation.positive_int(max_bytes, "max_bytes", minimum=1, maximum=READ_FILE_MAX_BYTES)
    sandbox = access.get_sandbox(principal, sandbox_id, READ, "read files")
    _require_running(sandbox)
    current().details.update({"path": full, "offset": offset})
    argv = ["sh", "-c", _READ_RANGE, "sh", full, str(offset + 1), str(max_bytes)]
    try:
        result = sandbox.host.backend().exec(
            sandbox.backend_state, argv, cwd="/", env={}, timeout=60, output_cap=max_bytes + 1024
        )
    except BackendError as exc:
        raise BackendFailure(f"could not read {full} in sandbox {sandbox_id}: {exc}") from exc
    if result.exit_code == _NOT_A_FILE:
        raise InvalidInput(f"{full} is not a regular file")
    if result.exit_code != 0:
        reason = decode_output(result.stderr).strip()
        if not reason or "No such file" in reason:
            raise NotFound(f"{full} not found in sandbox {sandbox_id}")
        raise InvalidInput(f"cannot read {full}: {reason.splitlines()[-1]}")
    size = int(result.stderr.decode().split()[0])
    content = result.stdout[:max_bytes]
    return FileContent(
        path=full, content=content, offset=offset, size=size, eof=offset + len(content) >= size
    )


# --- hosts -----------------------------------------------------------------------------------


@audited("host.list", "host")
def list_hosts(principal: Principal) -> list[HostInfo]:
    """Hosts the principal's team may use (shared and its private ones), idlest first."""
    access.require(principal, READ, "list hosts")
    hosts = (
        Host.objects.all()
        if access.is_platform_admin(principal) and principal.team is None
        else placement.visible_hosts(principal.team)
    )
    return [_host_info(h) for h in hosts]


def _host_info(host: Host) -> HostInfo:
    return HostInfo(
        name=host.name,
        kind=host.kind,
        private=host.team_id is not None,
        enabled=host.enabled,
        draining=host.draining,
        healthy=host.healthy,
        idle_score=host.idle_score,
        cpu_percent=host.cpu_percent,
        memory_percent=host.memory_percent,
        gpu_percent=host.gpu_percent,
        sandboxes_running=host.sandboxes.live().count(),
        max_sandboxes=host.max_sandboxes,
        last_probe_at=host.last_probe_at,
        last_error=host.last_error,
    )


@audited("host.probe", "host")
def probe_host(principal: Principal, host_id: int) -> HostInfo:
    """Ask the host how it is, store the figures and an idle score (platform admins only)."""
    host = _admin_host(principal, host_id)
    # The same probe and bookkeeping as the scheduled one (GPU, host.down / host.up rows).
    result = lifecycle.probe(host)
    lifecycle.record_probe(host, result)
    current().details.update({"healthy": result.healthy, "idle_score": host.idle_score})
    return _host_info(host)


@audited("host.drain", "host")
def set_host_draining(principal: Principal, host_id: int, draining: bool = True) -> HostInfo:
    host = _admin_host(principal, host_id)
    host.draining = bool(draining)
    host.save(update_fields=["draining"])
    current().details["draining"] = host.draining
    return _host_info(host)


def _admin_host(principal: Principal, host_id: int) -> Host:
    current().target("host", host_id)
    if not access.is_platform_admin(principal):
        raise PermissionDenied("only platform admins manage hosts")
    host = Host.objects.filter(pk=host_id).first()
    if host is None:
        raise NotFound(f"host {host_id} not found")
    return host


# --- lifecycle: auto-cleanup, reconciliation, host probes, warm pool -------------------------
# Run by the django-q2 schedules in sandboxes/tasks.py as the system; the work is done in
# sandboxes/lifecycle.py and sandboxes/pool.py. The runs themselves leave no audit row (one
# a minute would bury the log); what they change does: sandbox.expire, sandbox.idle,
# sandbox.lost, host.down, host.up, reconcile.orphan_removed.


def sweep_expired_and_idle(principal: Principal) -> lifecycle.SweepReport:
    """Delete sandboxes past their lifetime or idle beyond their team's idle timeout."""
    _require_platform(principal, "sweep sandboxes")
    return lifecycle.sweep()


def reconcile_hosts(principal: Principal) -> lifecycle.ReconcileReport:
    """Remove orphan containers, mark vanished sandboxes lost and silent hosts down."""
    _require_platform(principal, "reconcile hosts")
    return lifecycle.reconcile()


def probe_all_hosts(principal: Principal) -> list[HostInfo]:
    """Probe every enabled host at once and store health, load and idle score."""
    _require_platform(principal, "probe hosts")
    return [_host_info(host) for host in lifecycle.probe_hosts()]


def refill_warm_pools(principal: Principal) -> pool.RefillReport:
    """Start or remove warm-pool containers until each pool has its size."""
    _require_platform(principal, "refill warm pools")
    return pool.refill()


def _require_platform(principal: Principal, doing: str) -> None:
    if not access.is_platform_admin(principal):
        raise PermissionDenied(f"only the system and platform admins may {doing}")
