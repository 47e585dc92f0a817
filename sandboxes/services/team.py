"""The team as its members see it (the web pages' Home, API keys and Team pages): what the team
uses against its limits, the images it may start, the user's own API keys, and, for owners
and admins, the members, the audit log and the command history across sandboxes.

Reads are audited like list_sandboxes is. The changes by id or username (revoke a key, add,
re-role or remove a member) find the row in the principal's own team (another team's row is
not found) and then run the tenants.services function that does the change; that function's
body runs inside this call's audit draft, so each call still leaves exactly one row, under
the same action as a direct call would.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.contrib.auth import get_user_model
from django.db.models import QuerySet, Sum

from hosts.models import Image
from sandboxes.contract.errors import InvalidInput, NotFound, PermissionDenied
from sandboxes.models import CommandExecution, CommandStatus, Sandbox, Snapshot
from sandboxes.policy import access, placement
from sandboxes.policy.access import READ
from tenants import services as tenant_services
from tenants.auditing import AUDIT_VIEW, audited, current, unaudited
from tenants.models import ApiKey, AuditKind, AuditLog, Channel, Membership, Role, Team
from tenants.principal import Principal

MANAGER_ROLES = frozenset({Role.OWNER, Role.ADMIN})


@dataclass(frozen=True)
class ImageChoice:
    name: str
    description: str
    is_default: bool


@dataclass(frozen=True)
class TeamUsage:
    """What the team's live sandboxes use against the team's limits, and what a new sandbox
    may ask for (images, per-sandbox maxima, network)."""

    team: str
    running: int
    max_running: int
    cpus_in_use: float
    memory_mb_in_use: int
    disk_mb_in_use: int
    max_cpus_per_sandbox: float
    max_memory_mb_per_sandbox: int
    max_disk_mb_per_sandbox: int
    default_lifetime_minutes: int
    max_lifetime_minutes: int
    idle_timeout_minutes: int
    allow_network: bool
    images: tuple[ImageChoice, ...]
    # Whether any host the team may use reports a GPU (its probe gives a GPU load).
    gpu_hosts: bool
    # Quotas by state (policy/quotas.py) and what idleness does (Team.idle_action).
    paused: int = 0
    max_paused: int = 0
    stopped: int = 0
    max_stopped: int = 0
    idle_action: str = "delete"
    stop_paused_after_hours: int = 0
    delete_stopped_after_days: int = 0
    # Snapshots kept (not deleted) and the disk they take, against the team's limits.
    snapshots: int = 0
    max_snapshots: int = 0
    snapshot_mb: float = 0.0
    max_snapshot_mb: int = 0

    @property
    def default_image(self) -> str | None:
        return next((i.name for i in self.images if i.is_default), None)


@audited("team.usage", "team", kind=AUDIT_VIEW)
def team_usage(principal: Principal) -> TeamUsage:
    """The team's usage and limits; any member may see them."""
    access.require(principal, READ, "see the team's usage")
    team = _team(principal)
    current().target("team", team.slug)
    live = Sandbox.objects.filter(team=team).live()
    kept = Snapshot.objects.live().filter(team=team)
    sums = live.aggregate(cpus=Sum("cpus"), memory=Sum("memory_mb"), disk=Sum("disk_mb"))
    images = tuple(
        ImageChoice(i.name, i.description, i.is_default)
        for i in Image.objects.prefetch_related("teams")
        if i.allowed_for(team)
    )
    return TeamUsage(
        team=team.slug,
        running=live.count(),
        max_running=team.max_running_sandboxes,
        cpus_in_use=float(sums["cpus"] or 0),
        memory_mb_in_use=int(sums["memory"] or 0),
        disk_mb_in_use=int(sums["disk"] or 0),
        max_cpus_per_sandbox=team.max_cpus_per_sandbox,
        max_memory_mb_per_sandbox=team.max_memory_mb_per_sandbox,
        max_disk_mb_per_sandbox=team.max_disk_mb_per_sandbox,
        default_lifetime_minutes=min(team.default_lifetime_minutes, team.max_lifetime_minutes),
        max_lifetime_minutes=team.max_lifetime_minutes,
        idle_timeout_minutes=team.idle_timeout_minutes,
        allow_network=team.allow_network,
        images=images,
        gpu_hosts=placement.visible_hosts(team).filter(gpu_percent__isnull=False).exists(),
        paused=Sandbox.objects.filter(team=team).paused().count(),
        max_paused=team.max_paused_sandboxes,
        stopped=Sandbox.objects.filter(team=team).stopped().count(),
        max_stopped=team.max_stopped_sandboxes,
        idle_action=team.idle_action,
        stop_paused_after_hours=team.stop_paused_after_hours,
        delete_stopped_after_days=team.delete_stopped_after_days,
        snapshots=kept.count(),
        max_snapshots=team.max_snapshots,
        snapshot_mb=round((kept.aggregate(total=Sum("size_bytes"))["total"] or 0) / 2**20, 1),
        max_snapshot_mb=team.max_snapshot_mb,
    )


# --- my API keys -----------------------------------------------------------------------------


@audited("apikey.list", "apikey", kind=AUDIT_VIEW)
def list_my_api_keys(principal: Principal) -> list[ApiKey]:
    """The acting user's own keys in the acting team, newest first (revoked ones included)."""
    access.require(principal, READ, "list API keys")
    team = _team(principal)
    return list(ApiKey.objects.filter(user=principal.user, team=team).order_by("-created_at"))


@audited("apikey.revoke", "apikey", atomic=True)
def revoke_api_key_by_id(principal: Principal, key_id: int) -> ApiKey:
    """Revoke key `key_id` of the acting team (tenants.services.revoke_api_key decides who may)."""
    current().target("apikey", key_id)
    team = _team(principal)
    key = ApiKey.objects.select_related("user", "team").filter(pk=key_id, team=team).first()
    if key is None:
        raise NotFound(f"API key {key_id} not found")
    return unaudited(tenant_services.revoke_api_key)(principal, key)


# --- members ---------------------------------------------------------------------------------


@audited("membership.list", "team", kind=AUDIT_VIEW)
def list_members(principal: Principal) -> list[Membership]:
    """The team's members with their roles, owners first (owners and admins only)."""
    team = _manager_team(principal, "see the team's members")
    current().target("team", team.slug)
    order: dict[str, int] = {Role.OWNER: 0, Role.ADMIN: 1, Role.MEMBER: 2, Role.VIEWER: 3}
    rows = Membership.objects.filter(team=team).select_related("user", "team")
    return sorted(rows, key=lambda m: (order.get(m.role, 9), m.user.get_username()))


@audited("membership.add", "membership", atomic=True)
def add_member_by_username(principal: Principal, username: str, role: str) -> Membership:
    """Add the existing user `username` to the acting team (no user is created here)."""
    current().target("membership", str(username)[:64])
    # Authorize before looking the name up, so only managers learn which usernames exist.
    team = _manager_team(principal, "add members")
    username = (username or "").strip()
    if not username:
        raise InvalidInput("give the username of an existing user")
    user_model = get_user_model()
    user = user_model.objects.filter(**{user_model.USERNAME_FIELD: username}).first()
    if user is None:
        raise InvalidInput(f"no user named {username!r}: they need an account first")
    return unaudited(tenant_services.add_member)(principal, team, user, role)


@audited("membership.change_role", "membership", atomic=True)
def change_member_role(principal: Principal, membership_id: int, role: str) -> Membership:
    membership = _membership(principal, membership_id)
    return unaudited(tenant_services.change_role)(principal, membership, role)


@audited("membership.remove", "membership", atomic=True)
def remove_member_by_id(principal: Principal, membership_id: int) -> None:
    membership = _membership(principal, membership_id)
    unaudited(tenant_services.remove_member)(principal, membership)


def _membership(principal: Principal, membership_id: int) -> Membership:
    """A membership of the acting team, else NotFound (another team's is not found either)."""
    current().target("membership", membership_id)
    team = _team(principal)
    row = Membership.objects.select_related("user", "team").filter(pk=membership_id, team=team)
    membership = row.first()
    if membership is None:
        raise NotFound(f"membership {membership_id} not found")
    return membership


# --- the team's audit log and command history ------------------------------------------------


@audited("audit.list", "team", kind=AUDIT_VIEW)
def team_audit_log(
    principal: Principal,
    *,
    actor: str = "",
    action: str = "",
    channel: str = "",
    kind: str = "",
    since: datetime | None = None,
    until: datetime | None = None,
) -> QuerySet[AuditLog]:
    """The team's audit rows, newest first (owners and admins only). `actor` is a username,
    `action` matches the start of the action (`sandbox.` gives every sandbox action), `kind`
    is change, read or view (AuditKind)."""
    team = _manager_team(principal, "read the team's audit log")
    current().target("team", team.slug)
    if channel and channel not in Channel.values:
        raise InvalidInput(f"unknown channel {channel!r}; use one of {', '.join(Channel.values)}")
    if kind and kind not in AuditKind.values:
        raise InvalidInput(f"unknown kind {kind!r}; use one of {', '.join(AuditKind.values)}")
    asked = {"actor": actor, "action": action, "channel": channel, "kind": kind}
    current().details.update({k: v for k, v in asked.items() if v})
    rows = AuditLog.objects.filter(team=team).select_related("actor")
    if actor:
        user_model = get_user_model()
        rows = rows.filter(**{f"actor__{user_model.USERNAME_FIELD}": actor})
    if action:
        rows = rows.filter(action__startswith=action)
    if channel:
        rows = rows.filter(channel=channel)
    if kind:
        rows = rows.filter(kind=kind)
    if since is not None:
        rows = rows.filter(created_at__gte=since)
    if until is not None:
        rows = rows.filter(created_at__lt=until)
    return rows.order_by("-created_at", "-id")


@audited("command.list_team", "team", kind=AUDIT_VIEW)
def team_commands(principal: Principal, *, status: str = "") -> QuerySet[CommandExecution]:
    """Commands run in any of the team's sandboxes, deleted ones included, newest first
    (owners and admins only)."""
    team = _manager_team(principal, "read the team's command history")
    current().target("team", team.slug)
    if status and status not in CommandStatus.values:
        raise InvalidInput(
            f"unknown status {status!r}; use one of {', '.join(CommandStatus.values)}"
        )
    if status:
        current().details["status"] = status
    rows = CommandExecution.objects.filter(sandbox__team=team).select_related("sandbox", "actor")
    if status:
        rows = rows.filter(status=status)
    return rows.order_by("-created_at", "-id")


# --- who is acting ---------------------------------------------------------------------------


def _team(principal: Principal) -> Team:
    if principal.team is None:
        raise PermissionDenied("you are not a member of any team")
    return principal.team


def _manager_team(principal: Principal, doing: str) -> Team:
    """The acting team, if the principal is its owner or admin (or a platform admin)."""
    role = access.require(principal, READ, doing)
    team = _team(principal)
    if role not in MANAGER_ROLES:
        raise PermissionDenied(f"only a team owner or admin may {doing}")
    if principal.scopes is not None and "admin" not in principal.scopes:
        raise PermissionDenied(f"this API key has no admin scope, needed to {doing}")
    return team
