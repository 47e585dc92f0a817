"""Previews: a port of a sandbox reached through the platform (the proxy in sandboxes/proxy/).

deploy_app starts an app as a background command and waits until its port answers;
get_preview_url opens a preview of a port (an app started any other way) and hands out an
expiring token for it; stop_app closes the preview and stops its command; and
list_previews shows the open ones. Who may then open a preview, and the stream to its port,
is the proxy's side (previews_access.py); addresses are in previews_tokens.py, and tokens are
rows with the rules of access_links.py (a viewer's live at most VIEWER_TOKEN_SECONDS).

Limits are the team's: which ports (Team.allowed_preview_ports), how many open previews per
sandbox (Team.max_previews_per_sandbox), and whether its owners and admins may make one
public (Team.allow_public_previews). A preview lives until it is stopped or its sandbox
stops (deleted, expired, idle, lost): the proxy only serves previews of running sandboxes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from django.db import transaction

from hosts.backends.base import BackendError, PortClosed, SandboxGone, Unsupported
from sandboxes.contract.errors import (
    BackendFailure,
    Conflict,
    InvalidInput,
    NotFound,
    PermissionDenied,
    QuotaExceeded,
    ServiceError,
)
from sandboxes.contract.results import BackgroundCheck, DeployedApp, PreviewInfo, PreviewLink
from sandboxes.models import AccessLink, CommandStatus, Preview, Sandbox, SandboxStatus
from sandboxes.policy import access, validation
from sandboxes.policy.access import READ, WRITE
from sandboxes.services import access_links
from sandboxes.services.background import cancel_background, check_background, start_background
from sandboxes.services.common import backend_of, mark_lost, running_sandbox
from sandboxes.services.previews_tokens import MAX_TOKEN_SECONDS
from tenants.auditing import AUDIT_VIEW, audited, change, current, unaudited
from tenants.models import Role, Team
from tenants.principal import Principal

F = TypeVar("F", bound=Callable[..., Any])

MIN_TOKEN_SECONDS = 60
DEFAULT_WAIT_SECONDS = 30.0
MAX_WAIT_SECONDS = 300.0
POLL_SECONDS = 0.25  # between looks at the port and the job while an app starts
RELEASE_SECONDS = 5.0  # for a replaced app's port to be free (SIGKILL comes 2 s after SIGTERM)
PROBE_TIMEOUT = 2.0  # one look at the port
LOG_TAIL_CHARS = 4000  # of a failed app's log, in the error


class DeployFailed(ServiceError):
    """The app did not come up: it exited, or its port did not answer in time."""

    code = "deploy_failed"
    http_status = 422


# --- the actions -----------------------------------------------------------------------------


@audited("app.deploy", "sandbox")
def deploy_app(
    principal: Principal,
    sandbox_id: str,
    *,
    command: str,
    port: int,
    env: dict[str, str] | None = None,
    cwd: str = validation.WORKSPACE,
    wait_seconds: float = DEFAULT_WAIT_SECONDS,
) -> DeployedApp:
    """Start `command` as a background command (it must serve on `port` in the foreground),
    wait until the port answers, and open the port's preview with a token.

    The app's files are expected in the sandbox already (the interfaces upload them first).
    A preview already open on the port is replaced (its command stopped). If the app exits
    with an error, or the port does not answer within wait_seconds, the command is cancelled,
    no preview is left, and the error carries the end of the app's log.
    """
    current().target("sandbox", sandbox_id)
    port = _port_number(port)
    wait = _seconds(wait_seconds, "wait_seconds", 1, MAX_WAIT_SECONDS)
    command = validation.command(command)
    sandbox = running_sandbox(principal, sandbox_id, WRITE, "deploy apps")
    _require_port_allowed(sandbox.team, port)
    current().details.update({"port": port, "wait_seconds": wait})
    _check_room(sandbox, port)
    previous = Preview.objects.open().filter(sandbox=sandbox, port=port).first()
    stopped = False
    if previous is not None:
        current().details["replaced_preview"] = previous.pk
        stopped = _stop(principal, sandbox, previous, "replaced by a new deploy_app")
    if _still_listening(sandbox, port, RELEASE_SECONDS if stopped else 0.0):
        raise Conflict(
            f"something already listens on port {port} in sandbox {sandbox.public_id}: stop it "
            "(cancel_background, or stop_app for a preview), or deploy on another port"
        )
    started = unaudited(start_background)(principal, sandbox.public_id, command, cwd=cwd, env=env)
    failure = _wait_until_listening(principal, sandbox, port, started.id, wait)
    if failure:
        tail = _give_up(principal, sandbox.public_id, started.id)
        current().details["log_tail"] = tail[-1000:]
        raise DeployFailed(
            f"{failure}; the app (command {started.id}) was stopped and no preview opened. "
            f"The end of its log:\n{tail or '(empty)'}"
        )
    preview = _open_row(principal, sandbox, port, None, command_id=started.id)
    link, token = access_links.mint_preview_token(principal, sandbox, preview, None)
    current().details.update(
        {"preview_id": preview.pk, "link_id": link.public_id, "expires_at": _iso(link)}
    )
    return DeployedApp(
        sandbox_id=sandbox.public_id,
        port=port,
        preview_id=preview.pk,
        command_id=started.id,
        token=token,
        link_id=link.public_id,
        expires_at=link.expires_at,
    )


@audited("preview.open", "sandbox")
def get_preview_url(
    principal: Principal,
    sandbox_id: str,
    port: int,
    *,
    expires_seconds: int | None = None,
    public: bool | None = None,
) -> PreviewLink:
    """Open a preview of the port (or take the one open) and a token for it, valid
    expires_seconds (None: DEFAULT_TOKEN_SECONDS, or the most a viewer may have). public:
    true opens it to anyone with the address (team owners and admins, if the team allows
    it), false closes that again, None leaves it as it is.

    A viewer (or a read-only key) may get a short token for a preview already open (he may
    look at it with his session too; a preview host name does not see that session), never
    open one or change it."""
    current().target("sandbox", sandbox_id)
    port = _port_number(port)
    seconds = None
    if expires_seconds is not None:
        seconds = int(
            _seconds(expires_seconds, "expires_seconds", MIN_TOKEN_SECONDS, MAX_TOKEN_SECONDS)
        )
    if public is not None and not isinstance(public, bool):
        raise InvalidInput("public must be true, false or null")
    sandbox = running_sandbox(principal, sandbox_id, READ, "see previews")
    if public is not None or not Preview.objects.open().filter(sandbox=sandbox, port=port).exists():
        sandbox = running_sandbox(principal, sandbox_id, WRITE, "open previews")
    _require_port_allowed(sandbox.team, port)
    if public:
        _require_public_allowed(principal, sandbox.team)
    # The rows and the audit row in one transaction, after the sandbox was found running:
    # resuming it (running_sandbox) changes its host, which no rollback would undo.
    with change():
        preview = _open_row(principal, sandbox, port, public)
        link, token = access_links.mint_preview_token(principal, sandbox, preview, seconds)
        current().details.update(
            {
                "port": port,
                "preview_id": preview.pk,
                "public": preview.public,
                "link_id": link.public_id,
                "expires_at": _iso(link),
            }
        )
    return PreviewLink(
        sandbox_id=sandbox.public_id,
        port=port,
        preview_id=preview.pk,
        public=preview.public,
        token=token,
        link_id=link.public_id,
        expires_at=link.expires_at,
    )


@audited("app.stop", "sandbox")
def stop_app(principal: Principal, sandbox_id: str, port: int) -> PreviewInfo:
    """Close the port's preview (its tokens die at once) and cancel the background command
    serving it, if deploy_app started one."""
    current().target("sandbox", sandbox_id)
    port = _port_number(port)
    sandbox = access.get_sandbox(principal, sandbox_id, WRITE, "stop apps")
    preview = Preview.objects.open().filter(sandbox=sandbox, port=port).first()
    if preview is None:
        raise NotFound(f"no open preview on port {port} of sandbox {sandbox.public_id}")
    who = principal.user.get_username() if principal.user else "the system"
    _stop(principal, sandbox, preview, f"stopped by {who}")
    preview.refresh_from_db()
    preview.sandbox = sandbox
    return PreviewInfo.from_model(preview)


@audited("preview.list", "sandbox", kind=AUDIT_VIEW)
def list_previews(principal: Principal, sandbox_id: str) -> list[PreviewInfo]:
    """The sandbox's open previews, by port."""
    current().target("sandbox", sandbox_id)
    sandbox = access.get_sandbox(principal, sandbox_id, READ, "see previews")
    previews = sandbox.previews.open().select_related("created_by").order_by("port")
    found = []
    for preview in previews:
        preview.sandbox = sandbox
        found.append(PreviewInfo.from_model(preview))
    return found


# --- checks ----------------------------------------------------------------------------------


def _port_number(port: Any) -> int:
    validation.positive_int(port, "port", minimum=1, maximum=65535)
    return int(port)


def _seconds(value: Any, what: str, minimum: float, maximum: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInput(f"{what} must be a number of seconds")
    if not minimum <= value <= maximum:
        raise InvalidInput(f"{what} must be between {minimum:g} and {maximum:g}; got {value}")
    return float(value)


def _require_port_allowed(team: Team, port: int) -> None:
    if not team.allows_preview_port(port):
        allowed = team.allowed_preview_ports or "none"
        raise PermissionDenied(
            f"team {team.slug} may not preview port {port}; ports allowed: {allowed}"
        )


def _require_public_allowed(principal: Principal, team: Team) -> None:
    if not team.allow_public_previews:
        raise PermissionDenied(
            f"team {team.slug} does not allow public previews (a platform admin may allow them)"
        )
    if access.role_of(principal) not in (Role.OWNER, Role.ADMIN):
        raise PermissionDenied("only the team's owners and admins may make a preview public")


def _check_room(sandbox: Sandbox, port: int) -> None:
    """Refused before anything starts when a new preview would not fit."""
    others = Preview.objects.open().filter(sandbox=sandbox).exclude(port=port).count()
    if others >= sandbox.team.max_previews_per_sandbox:
        raise QuotaExceeded(_too_many(sandbox, others))


def _too_many(sandbox: Sandbox, count: int) -> str:
    return (
        f"team quota: at most {sandbox.team.max_previews_per_sandbox} open previews per "
        f"sandbox ({count} open); stop one first (stop_app)"
    )


# --- previews and their commands -------------------------------------------------------------


def _open_row(
    principal: Principal,
    sandbox: Sandbox,
    port: int,
    public: bool | None,
    command_id: int | None = None,
) -> Preview:
    """The port's open preview, made if there is none (within the team's limit)."""
    with transaction.atomic():
        # One at a time per sandbox (the row lock; SQLite: one write transaction at a time),
        # so concurrent calls neither pass the count together nor open the port twice.
        list(Sandbox.objects.select_for_update().filter(pk=sandbox.pk).values_list("pk"))
        preview = Preview.objects.open().filter(sandbox=sandbox, port=port).first()
        if preview is None:
            count = Preview.objects.open().filter(sandbox=sandbox).count()
            if count >= sandbox.team.max_previews_per_sandbox:
                raise QuotaExceeded(_too_many(sandbox, count))
            return Preview.objects.create(
                sandbox=sandbox,
                port=port,
                public=bool(public),
                created_by=principal.user,
                command_id=command_id,
            )
        changed: list[str] = []
        if public is not None and preview.public != public:
            preview.public, changed = public, [*changed, "public"]
        if command_id is not None:
            preview.command_id, changed = command_id, [*changed, "command"]
        if changed:
            preview.save(update_fields=changed)
        return preview


def _iso(link: AccessLink) -> str:
    return link.expires_at.isoformat()


def _stop(principal: Principal, sandbox: Sandbox, preview: Preview, reason: str) -> bool:
    """Close the preview first (access ends at once), then cancel its command if it runs;
    whether a command was cancelled."""
    with change():  # the action's row with it (a deploy's is amended when the deploy ends)
        Preview.objects.filter(pk=preview.pk).stop(reason)
    command = preview.command
    if command is None or command.status not in (CommandStatus.QUEUED, CommandStatus.RUNNING):
        return False
    # A paused sandbox's command is frozen: cancel_background resumes the sandbox to end it.
    if sandbox.status not in (SandboxStatus.RUNNING, SandboxStatus.PAUSED):
        return False  # its command went (or goes) with the sandbox
    current().details["stopped_command"] = command.pk
    unaudited(cancel_background)(principal, sandbox.public_id, command.pk)
    return True


def _still_listening(sandbox: Sandbox, port: int, grace: float) -> bool:
    """Whether the port is taken, after up to `grace` seconds for a stopped app to let go."""
    deadline = time.monotonic() + grace
    while _answers(sandbox, port):
        if time.monotonic() >= deadline:
            return True
        time.sleep(POLL_SECONDS)
    return False


def _answers(sandbox: Sandbox, port: int) -> bool:
    """Whether something listens on the port inside the sandbox (one connection, closed)."""
    try:
        stream = backend_of(sandbox).open_port(sandbox.backend_state, port, PROBE_TIMEOUT)
    except (PortClosed, TimeoutError):
        return False
    except Unsupported as exc:
        raise BackendFailure(
            f"sandbox {sandbox.public_id}'s host cannot reach its ports: no previews there ({exc})"
        ) from exc
    except BackendError as exc:
        if isinstance(exc, SandboxGone):
            mark_lost(sandbox, str(exc))
        raise BackendFailure(
            f"could not reach port {port} in sandbox {sandbox.public_id}: {exc}"
        ) from exc
    stream.close()
    return True


def _wait_until_listening(
    principal: Principal, sandbox: Sandbox, port: int, command_id: int, wait: float
) -> str:
    """Empty once the port answers, else why it gave up. An app that exited 0 may have put
    itself in the background (a daemon): its port is still waited for."""
    deadline = time.monotonic() + wait
    check = unaudited(check_background)
    ended: BackgroundCheck | None = None
    while True:
        if _answers(sandbox, port):
            return ""
        if ended is None:
            state = check(principal, sandbox.public_id, command_id, tail_lines=0)
            if not state.running:
                if state.status != CommandStatus.SUCCEEDED:
                    code = "" if state.exit_code is None else f", exit code {state.exit_code}"
                    return f"the app ended ({state.status}{code}) before port {port} answered"
                ended = state
        if time.monotonic() >= deadline:
            if ended is not None:
                return (
                    f"the command exited (exit code 0) and port {port} did not answer within "
                    f"{wait:g} s; run the server in the foreground (no '&', nohup or daemon "
                    "mode) so that deploy_app can follow it"
                )
            return f"port {port} did not answer within {wait:g} s"
        time.sleep(POLL_SECONDS)


def _give_up(principal: Principal, sandbox_id: str, command_id: int) -> str:
    """Cancel the app's command (if it still runs) and return the end of its log."""
    try:
        final = unaudited(cancel_background)(principal, sandbox_id, command_id)
    except ServiceError as exc:
        return f"(could not stop it: {exc.message})"
    return final.output[-LOG_TAIL_CHARS:]
