"""Terminals: a PTY in the sandbox a person types in from the browser (sandboxes/terminal_ws/
carries it over a websocket). The holder process in the sandbox keeps it running between
attaches (hosts/backends/interactive.py); the Terminal row says who opened it and when it
ended. Opening, attaching and closing are audited; what is typed never is."""

from __future__ import annotations

import contextlib
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from hosts.backends.base import BackendError, SandboxBackend, TerminalGone, TerminalStream
from sandboxes.contract.errors import Conflict, InvalidInput, NotFound, PermissionDenied
from sandboxes.contract.terminals import TerminalResult
from sandboxes.models import Sandbox, SandboxStatus, Terminal, TerminalKind
from sandboxes.policy import access
from sandboxes.policy.access import READ, WRITE
from sandboxes.services.common import backend_errors, backend_of, running_sandbox
from tenants.auditing import AUDIT_READ, AUDIT_VIEW, audited, change, current
from tenants.principal import Principal

MAX_COLS, MAX_ROWS = 1000, 500
# A team without an idle timeout (0) still has its unattended terminals ended after a week.
NO_IDLE_TIMEOUT_SECONDS = 7 * 24 * 3600
# How often a connection's activity is written (last_seen_at, the sandbox's activity).
SEEN_WRITE_INTERVAL = timedelta(seconds=30)


def max_terminals_per_sandbox() -> int:
    """Open terminals a sandbox may have at once: each is a shell and a holder in it."""
    return int(getattr(settings, "SANDHUB_MAX_TERMINALS_PER_SANDBOX", 5))


def window_size(cols: object, rows: object) -> tuple[int, int]:
    """A terminal window's size, checked (bool is no number here)."""
    if not isinstance(cols, int) or isinstance(cols, bool) or not 2 <= cols <= MAX_COLS:
        raise InvalidInput(f"cols must be a whole number from 2 to {MAX_COLS}")
    if not isinstance(rows, int) or isinstance(rows, bool) or not 1 <= rows <= MAX_ROWS:
        raise InvalidInput(f"rows must be a whole number from 1 to {MAX_ROWS}")
    return cols, rows


def idle_timeout_of(sandbox: Sandbox) -> float:
    """The team's idle timeout, in seconds: an unattended terminal ends after it."""
    minutes = sandbox.team.idle_timeout_minutes
    return float(minutes * 60) if minutes else float(NO_IDLE_TIMEOUT_SECONDS)


@audited("terminal.open", "sandbox")
def open_terminal(
    principal: Principal, sandbox_id: str, *, cols: int = 80, rows: int = 24
) -> TerminalResult:
    """Start a terminal (the sandbox user's shell in /workspace) and record it. Members and
    up; at most SANDHUB_MAX_TERMINALS_PER_SANDBOX open at once."""
    current().target("sandbox", sandbox_id)
    cols, rows = window_size(cols, rows)
    sandbox = running_sandbox(principal, sandbox_id, WRITE, "open terminals")
    backend = backend_of(sandbox)
    cap = max_terminals_per_sandbox()
    if _open_terminals(sandbox).count() >= cap:
        reconcile(sandbox, backend)  # some may have ended on their own
    with change():
        if _open_terminals(sandbox).count() >= cap:
            raise Conflict(
                f"sandbox {sandbox_id} has {cap} open terminals, the "
                "most it may have (SANDHUB_MAX_TERMINALS_PER_SANDBOX): close one first"
            )
        terminal = Terminal.objects.create(
            sandbox=sandbox,
            kind=TerminalKind.TERMINAL,
            opened_by=principal.user,
            api_key=principal.extra.get("api_key", ""),
            channel=principal.channel,
        )
        current().details.update({"terminal_id": terminal.terminal_id, "cols": cols, "rows": rows})
    try:
        with backend_errors(sandbox, "open a terminal"):
            backend.open_terminal(
                sandbox.backend_state,
                terminal.backend_id,
                cols=cols,
                rows=rows,
                env=dict(sandbox.env),
                idle_timeout=idle_timeout_of(sandbox),
            )
    except Exception:
        Terminal.objects.filter(pk=terminal.pk).close("it could not be started")
        raise
    return TerminalResult.from_model(terminal)


@audited("terminal.attach", "terminal", kind=AUDIT_READ)
def attach_terminal(principal: Principal, sandbox_id: str, terminal_id: str) -> TerminalStream:
    """A stream to the principal's open terminal (first its scrollback, then its output; what
    is written to it is typed). Checked on every attach: the terminal is of the principal's
    team's sandbox, open, and the principal may write. The caller closes the stream."""
    current().target("terminal", terminal_id)
    terminal = _terminal(principal, sandbox_id, terminal_id, WRITE, "use terminals")
    sandbox = terminal.sandbox
    if sandbox.status != SandboxStatus.RUNNING:
        sandbox = running_sandbox(principal, sandbox_id, WRITE, "use terminals")  # wakes it
    try:
        with backend_errors(sandbox, "attach to the terminal"):
            stream = backend_of(sandbox).attach_terminal(sandbox.backend_state, terminal.backend_id)
    except TerminalGone:
        _mark_closed(terminal, "it ended")
        raise
    Terminal.objects.filter(pk=terminal.pk).update(last_seen_at=timezone.now())
    return stream


def terminal_gone(error: BaseException) -> bool:
    """Whether an attach failed because the terminal ended (the websocket says "ended")."""
    return isinstance(error.__cause__, TerminalGone) or isinstance(error, TerminalGone)


@audited("terminal.close", "terminal")
def close_terminal(principal: Principal, sandbox_id: str, terminal_id: str) -> TerminalResult:
    """End a terminal: its shell and what it started. Idempotent on an ended one."""
    current().target("terminal", terminal_id)
    terminal = _terminal(principal, sandbox_id, terminal_id, WRITE, "close terminals", ended=True)
    if terminal.closed_at is None:
        _end_in_sandbox(terminal)
        with change():
            _mark_closed(terminal, f"closed by {_who(principal)}")
    return TerminalResult.from_model(terminal)


@audited("terminal.get", "terminal", kind=AUDIT_VIEW)
def get_terminal(principal: Principal, sandbox_id: str, terminal_id: str) -> TerminalResult:
    """One terminal, open or ended, for someone who may use it (its page)."""
    current().target("terminal", terminal_id)
    terminal = _terminal(principal, sandbox_id, terminal_id, WRITE, "use terminals", ended=True)
    return TerminalResult.from_model(terminal)


@audited("terminal.list", "sandbox", kind=AUDIT_VIEW)
def list_terminals(principal: Principal, sandbox_id: str) -> list[TerminalResult]:
    """The sandbox's open terminals, checked against what runs in it (one that ended on its
    own, by its shell's exit or its idle timeout, is marked closed here)."""
    current().target("sandbox", sandbox_id)
    sandbox = access.get_sandbox(principal, sandbox_id, READ, "see terminals")
    close_if_sandbox_ended(sandbox)
    if sandbox.status == SandboxStatus.RUNNING and _open_terminals(sandbox).exists():
        with contextlib.suppress(BackendError):  # else the list as recorded: host unreachable
            reconcile(sandbox, backend_of(sandbox))
    rows = _open_terminals(sandbox).select_related("sandbox", "opened_by")
    return [TerminalResult.from_model(t) for t in rows]


def terminal_seen(
    principal: Principal, sandbox_id: str, terminal_id: str, *, active: bool = True
) -> bool:
    """A connection's periodic check (not audited: it changes nothing the audit log keeps):
    the principal may still use the terminal and it is open. `active` (input or output since
    the last check) is recorded, so the sandbox is not swept as idle while someone works in
    it. False when access is lost."""
    try:
        terminal = _terminal(principal, sandbox_id, terminal_id, WRITE, "use terminals")
    except (NotFound, Conflict, PermissionDenied):
        return False
    if active:
        now = timezone.now()
        Terminal.objects.filter(pk=terminal.pk).update(last_seen_at=now)
        Sandbox.objects.filter(pk=terminal.sandbox.pk).update(last_activity_at=now)
    return True


# --- housekeeping ----------------------------------------------------------------------------


def close_stale_terminals() -> int:
    """Close the rows of terminals and sessions that cannot run any more: their sandbox
    stopped, was deleted or lost, or (running) its holder is gone. How many were closed."""
    closed = (
        Terminal.objects.open().exclude(sandbox__status__in=_HOLDING).close("its sandbox stopped")
    )
    running = Sandbox.objects.filter(
        status=SandboxStatus.RUNNING, terminals__closed_at__isnull=True
    ).distinct()
    for sandbox in running.select_related("host"):
        try:
            closed += reconcile(sandbox, backend_of(sandbox))
        except Exception:  # noqa: BLE001 - one unreachable host must not stop the rest
            continue
    return closed


def close_if_sandbox_ended(sandbox: Sandbox) -> None:
    if sandbox.status not in _HOLDING:
        Terminal.objects.filter(sandbox=sandbox).close("its sandbox stopped")


def reconcile(sandbox: Sandbox, backend: SandboxBackend) -> int:
    """Mark closed the open rows whose holder no longer runs in the sandbox."""
    running = {info.terminal_id for info in backend.list_terminals(sandbox.backend_state)}
    rows = Terminal.objects.open().filter(sandbox=sandbox)
    gone = [row.pk for row in rows if row.backend_id not in running]
    return Terminal.objects.filter(pk__in=gone).close("it ended") if gone else 0


# Statuses in which a sandbox's holders live on (a paused one is frozen, not ended).
_HOLDING = (
    SandboxStatus.PENDING,
    SandboxStatus.STARTING,
    SandboxStatus.RUNNING,
    SandboxStatus.PAUSING,
    SandboxStatus.PAUSED,
    SandboxStatus.RESUMING,
)


def _open_terminals(sandbox: Sandbox):
    return Terminal.objects.open().filter(sandbox=sandbox, kind=TerminalKind.TERMINAL)


def _terminal(
    principal: Principal,
    sandbox_id: str,
    terminal_id: str,
    need: str,
    doing: str,
    *,
    ended: bool = False,
) -> Terminal:
    """The principal's team's terminal in that sandbox; another team's answers as missing.
    An ended one is Conflict unless `ended` allows it."""
    sandbox = access.get_sandbox(principal, sandbox_id, need, doing)
    if not isinstance(terminal_id, str) or len(terminal_id) > 64:
        raise NotFound(f"terminal {str(terminal_id)[:64]} not found")
    terminal = (
        Terminal.objects.select_related("sandbox", "sandbox__team", "sandbox__host", "opened_by")
        .filter(sandbox=sandbox, terminal_id=terminal_id, kind=TerminalKind.TERMINAL)
        .first()
    )
    if terminal is None:
        raise NotFound(f"terminal {terminal_id} not found")
    close_if_sandbox_ended(sandbox)
    terminal.refresh_from_db(fields=["closed_at", "close_reason"])
    if terminal.closed_at is not None and not ended:
        raise Conflict(f"terminal {terminal_id} has ended ({terminal.close_reason})")
    return terminal


def _end_in_sandbox(terminal: Terminal) -> None:
    sandbox = terminal.sandbox
    if sandbox.status != SandboxStatus.RUNNING:
        return  # a stopped sandbox's holders are gone; a paused one's end with the idle clock
    with backend_errors(sandbox, "close the terminal"):
        backend_of(sandbox).close_terminal(sandbox.backend_state, terminal.backend_id)


def _mark_closed(terminal: Terminal, reason: str) -> None:
    Terminal.objects.filter(pk=terminal.pk).close(reason)
    terminal.refresh_from_db(fields=["closed_at", "close_reason"])


def _who(principal: Principal) -> str:
    return principal.user.get_username() if principal.user is not None else "the system"
