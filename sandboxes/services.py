"""The one API every interface (web, REST, MCP, admin, tasks) calls.

Each function takes the acting principal first, then: authorizes (the sandbox belongs to the
principal's team, the role allows it, quotas hold), calls the host's backend, persists
history (one CommandExecution per command) and leaves one AuditLog row (the `audited`
decorator), and returns a plain result object. Another team's sandbox is "not found".
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from hosts.backends.base import (
    BackendError,
    ExecResult,
    FileEntry,
    OutputCallback,
    SandboxGone,
    SandboxSpec,
)
from hosts.models import Host, Image
from sandboxes import access, placement, tarballs, validation
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
from sandboxes.models import (
    CommandExecution,
    CommandStatus,
    Sandbox,
    SandboxStatus,
)
from sandboxes.results import (
    CommandResult,
    FileContent,
    HostInfo,
    SandboxInfo,
    UploadFile,
    UploadResult,
)
from tenants.models import Team
from tenants.principal import Principal

DEFAULT_CPUS = 1.0
DEFAULT_MEMORY_MB = 512
MIN_MEMORY_MB = 64
DEFAULT_PIDS_LIMIT = 256
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
        sandbox.backend_state = sandbox.host.backend().provision(spec)
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
    principal: Principal, sandbox_id: str, paths: list[str]
) -> list[tuple[str, bytes]]:
    """Files (or every file under directories) as (absolute path, content), one tar each."""
    current().target("sandbox", sandbox_id)
    if isinstance(paths, str):
        paths = [paths]
    if not isinstance(paths, list) or not paths or len(paths) > 100:
        raise InvalidInput("paths must be a list of 1 to 100 paths")
    wanted = [validation.path(p) for p in paths]
    sandbox = access.get_sandbox(principal, sandbox_id, READ, "read files")
    _require_running(sandbox)
    limit = settings.SANDHUB_MAX_TRANSFER_BYTES
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
    stream = _get(sandbox, full)
    current().details["path"] = full
    return tarballs.first_file(stream, full)


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
_READ_RANGE = (
    'test -f "$1" || { echo "not a regular file" >&2; exit 3; }; '
    'stat -c %s -- "$1" >&2 && tail -c +"$2" -- "$1" | head -c "$3"'
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
    if result.exit_code != 0:
        raise NotFound(f"{full} not found in sandbox {sandbox_id} or not a regular file")
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
    result = host.backend().probe()
    host.healthy = result.healthy
    host.last_probe_at = timezone.now()
    host.cpu_percent = result.cpu_percent
    host.memory_percent = result.memory_percent
    host.gpu_percent = result.gpu_percent
    host.last_error = result.error
    host.idle_score = placement.idle_score(host, result)
    host.save()
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
