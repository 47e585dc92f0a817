"""Changes to API keys and team memberships: the only code that makes them. Every function
takes the acting Principal first, authorizes, changes the rows in one transaction (a refusal
changes nothing) and leaves exactly one AuditLog row, success or failure.

Who may do what:

- A platform admin (the system, e.g. a management command, or an active staff user in Django
  admin; Principal.is_platform_admin) may do all of it, and is not held to the owner rules
  below, so he can repair any team.
- Everyone else acts only in the team of his principal: another team's key or membership
  answers as missing. Acting through an API key needs the key's admin scope, so a leaked
  read or write key cannot mint keys or change members.
- API keys are personal secrets: a user creates and edits only his own keys (any role may:
  a key never grants more than its user's role). His own key may be revoked by him, or by an
  owner or admin of the team (to stop a leaked key at once). Deleting a key row, which
  loses its history, is for platform admins; everyone else revokes.
- Memberships are managed by the team's owners and admins. Only an owner may grant or take
  away the owner role, or remove an owner. Any member may leave (remove his own membership).
  A team always keeps an owner: the last one can be neither demoted nor removed.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction

from tenants import apikeys, ratelimits
from tenants.auditing import audited, current
from tenants.errors import Conflict, InvalidInput, NotFound, PermissionDenied
from tenants.models import ApiKey, Membership, Role, Team
from tenants.principal import Principal

# Roles that manage a team's members and may revoke its members' keys.
MANAGER_ROLES = frozenset({Role.OWNER, Role.ADMIN})


# --- API keys --------------------------------------------------------------------------------


# Limited per key or user and per address (tenants/ratelimits.py), platform admins aside.
@ratelimits.rate_limited("apikey.create")
@audited("apikey.create", "apikey", atomic=True)
def create_api_key(
    principal: Principal,
    user: Any,
    team: Team,
    name: str = "",
    scopes: list[str] | tuple[str, ...] | str | None = None,
    expires_at: datetime | None = None,
) -> tuple[ApiKey, str]:
    """A new key for `user` in `team`, and its plaintext: returned here, stored nowhere."""
    current().details.update({"user": str(user), "name": name})
    if not principal.is_platform_admin:
        _member_role(principal, team, "create API keys", missing=f"team {team.slug} not found")
        if user.pk != principal.user.pk:
            raise PermissionDenied("you may create API keys only for yourself")
    current().team = team
    new = apikeys.create_key(user, team, name=name, scopes=scopes, expires_at=expires_at)
    current().target("apikey", new.key.prefix)
    current().details["scopes"] = new.key.scopes
    if expires_at is not None:
        current().details["expires_at"] = expires_at.isoformat()
    return new.key, new.plaintext


@audited("apikey.revoke", "apikey", atomic=True)
def revoke_api_key(principal: Principal, key: ApiKey) -> ApiKey:
    """Revoke the key for good (a revoked key is never brought back). Revoking a revoked key
    changes nothing and is not an error."""
    _key_draft(key)
    if not principal.is_platform_admin:
        role = _member_role(principal, key.team, "revoke API keys", missing=_missing(key))
        if key.user_id != principal.user.pk and role not in MANAGER_ROLES:
            raise PermissionDenied("only the key's user or a team owner or admin may revoke it")
    current().team = key.team
    with transaction.atomic():
        row = _locked_key(key)
        if row.revoked:
            current().details["already_revoked"] = True
        else:
            apikeys.revoke(row)
    key.revoked, key.revoked_at = row.revoked, row.revoked_at
    return key


@audited("apikey.update", "apikey", atomic=True)
def update_api_key(
    principal: Principal, key: ApiKey, name: str, expires_at: datetime | None
) -> ApiKey:
    """Rename the key or give it another expiry (None: never). Its owner, team and scopes
    never change: a key with other rights is a new key."""
    _key_draft(key)
    if not principal.is_platform_admin:
        _member_role(principal, key.team, "change API keys", missing=_missing(key))
        if key.user_id != principal.user.pk:
            raise PermissionDenied("you may change only your own API keys")
    current().team = key.team
    with transaction.atomic():
        row = _locked_key(key)
        changed = {
            field: [_plain(getattr(row, field)), _plain(value)]
            for field, value in (("name", name[:100]), ("expires_at", expires_at))
            if getattr(row, field) != value
        }
        current().details["changed"] = changed
        if changed:
            row.name, row.expires_at = name[:100], expires_at
            row.save(update_fields=list(changed))
    key.name, key.expires_at = row.name, row.expires_at
    return key


@audited("apikey.delete", "apikey", atomic=True)
def delete_api_key(principal: Principal, key: ApiKey) -> None:
    """Remove the key's row, and with it its history: platform admins only."""
    _key_draft(key)
    if not principal.is_platform_admin:
        _member_role(principal, key.team, "delete API keys", missing=_missing(key))
        raise PermissionDenied("only a platform admin may delete an API key; revoke it instead")
    current().team = key.team
    with transaction.atomic():
        _locked_key(key).delete()


def _key_draft(key: ApiKey) -> None:
    current().target("apikey", key.prefix)
    current().details["user"] = str(key.user)


def _missing(key: ApiKey) -> str:
    return f"API key shk_{key.prefix} not found"


def _locked_key(key: ApiKey) -> ApiKey:
    """The key's row as it is now, locked until the transaction ends."""
    row = ApiKey.objects.select_for_update().filter(pk=key.pk).first()
    if row is None:
        raise NotFound(_missing(key))
    return row


def _plain(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value


# --- memberships -----------------------------------------------------------------------------


@audited("membership.add", "membership", atomic=True)
def add_member(principal: Principal, team: Team, user: Any, role: str = Role.MEMBER) -> Membership:
    """Make `user` a member of `team` with `role`."""
    _membership_draft(team, user)
    current().details["role"] = str(role)
    _check_role(role)
    if not principal.is_platform_admin:
        acting = _manager_role(principal, team, "add members")
        if role == Role.OWNER and acting != Role.OWNER:
            raise PermissionDenied("only an owner may make a member owner")
    current().team = team
    conflict = Conflict(f"{user} is already a member of team {team.slug}")
    if Membership.objects.filter(user=user, team=team).exists():
        raise conflict
    try:
        with transaction.atomic():
            return Membership.objects.create(user=user, team=team, role=role)
    except IntegrityError as exc:  # added by someone else in the meantime
        raise conflict from exc


@audited("membership.change_role", "membership", atomic=True)
def change_role(principal: Principal, membership: Membership, role: str) -> Membership:
    """Give the member another role. The row is read afresh: `membership.role` may already
    hold the new value (a bound admin form), so it is not trusted as the previous one."""
    team, user = membership.team, membership.user
    _membership_draft(team, user)
    current().details["role"] = str(role)
    _check_role(role)
    with transaction.atomic():
        row = _locked_membership(membership)
        previous = row.role
        current().details["previous_role"] = previous
        if not principal.is_platform_admin:
            acting = _manager_role(principal, team, "change roles")
            if Role.OWNER in (previous, role) and acting != Role.OWNER:
                raise PermissionDenied("only an owner may grant or take away the owner role")
            if previous == Role.OWNER and role != Role.OWNER:
                _keep_an_owner(row)
        current().team = team
        if previous != role:
            row.role = role
            row.save(update_fields=["role"])
    membership.role = row.role
    return row


@audited("membership.remove", "membership", atomic=True)
def remove_member(principal: Principal, membership: Membership) -> None:
    """End the membership. The user's API keys for the team stop working at once (they are
    checked against the membership on every request) and work again if he is added back."""
    team, user = membership.team, membership.user
    _membership_draft(team, user)
    with transaction.atomic():
        row = _locked_membership(membership)
        current().details["role"] = row.role
        if not principal.is_platform_admin:
            if row.user_id == getattr(principal.user, "pk", None):  # leaving the team
                _member_role(principal, team, "leave the team", missing=f"team {team} not found")
            else:
                acting = _manager_role(principal, team, "remove members")
                if row.role == Role.OWNER and acting != Role.OWNER:
                    raise PermissionDenied("only an owner may remove an owner")
            if row.role == Role.OWNER:
                _keep_an_owner(row)
        current().team = team
        row.delete()


def _membership_draft(team: Team, user: Any) -> None:
    current().target("membership", user.get_username())
    current().details.update({"user": str(user), "team": team.slug})


def _check_role(role: str) -> None:
    if role not in Role.values:
        raise InvalidInput(f"unknown role {role!r}; use one of {', '.join(Role.values)}")


def _locked_membership(membership: Membership) -> Membership:
    row = Membership.objects.select_for_update().filter(pk=membership.pk).first()
    if row is None:
        raise NotFound(f"{membership.user} is not a member of team {membership.team}")
    return row


def _keep_an_owner(row: Membership) -> None:
    others = Membership.objects.filter(team_id=row.team_id, role=Role.OWNER).exclude(pk=row.pk)
    if not others.exists():
        raise Conflict(
            f"team {row.team} would be left without an owner: make another member owner first"
        )


# --- who is acting ---------------------------------------------------------------------------


def _member_role(principal: Principal, team: Team, doing: str, *, missing: str) -> str:
    """The principal's own role in `team`, which must be the team it acts in.

    Refuses a missing or inactive user, a key without the admin scope, and another team
    (answered as `missing`, so other teams' keys and members cannot be probed).
    """
    user = principal.user
    if user is None or not user.is_active:
        raise PermissionDenied(f"only an active user may {doing}")
    if principal.scopes is not None and "admin" not in principal.scopes:
        raise PermissionDenied(f"this API key has no admin scope, needed to {doing}")
    if principal.team is None or principal.team.pk != team.pk:
        raise NotFound(missing)
    membership = principal.membership()
    if membership is None:
        raise PermissionDenied(f"you are not a member of team {team}")
    return membership.role


def _manager_role(principal: Principal, team: Team, doing: str) -> str:
    role = _member_role(principal, team, doing, missing=f"team {team} not found")
    if role not in MANAGER_ROLES:
        raise PermissionDenied(f"only a team owner or admin may {doing}")
    return role
