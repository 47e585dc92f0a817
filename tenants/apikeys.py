"""API keys: make one (the plaintext is returned once), check one, revoke one.

A key reads `shk_<prefix>_<secret>`. The 8-character prefix is stored in clear to find the row
(and to name the key in logs and admin); the 256-bit secret is stored only as its SHA-256.
A slow password hash buys nothing for a random secret that long, and a fast one keeps every
request cheap. Hashes are compared in constant time.

Every refused key leaves one audit row (apikey.auth), and failures are counted per key prefix
and per source address: too many lock that prefix or address out for a while, the right key
included (tenants/ratelimits.py; RateLimited, HTTP 429).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
import re
import secrets
import string
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import OuterRef, QuerySet, Subquery
from django.utils import timezone

from dbkit.prepared import PreparedRead
from tenants import ratelimits
from tenants.errors import InvalidInput
from tenants.models import ApiKey, ApiKeyScope, Channel, McpSession, Membership, Team
from tenants.principal import Principal

logger = logging.getLogger("sandhub.apikeys")

KEY_MARK = "shk"
PREFIX_LENGTH = 8
_PREFIX_ALPHABET = string.ascii_lowercase + string.digits
_KEY_RE = re.compile(r"^shk_([a-z0-9]{8})_([A-Za-z0-9_\-]{20,100})$")
ALL_SCOPES = frozenset(ApiKeyScope.values)
DEFAULT_SCOPES = ("read", "write")
# last_used_* is rewritten at most this often per key, so busy agents do not turn every
# request into a write on the same row.
TOUCH_INTERVAL = timedelta(seconds=30)


class ApiKeyError(InvalidInput, ValueError):
    """Bad arguments for a new key (unknown scope, no membership, expiry in the past).

    An InvalidInput, so the services' audit rows record it as "invalid" and every interface
    shows its message as it shows any other refusal.
    """


@dataclass(frozen=True)
class NewKey:
    key: ApiKey
    plaintext: str  # shown once, never stored


def _hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def normalise_scopes(scopes: list[str] | tuple[str, ...] | str | None) -> list[str]:
    """Known scopes, sorted; write implies read (a key that may change things may look)."""
    if scopes is None:
        scopes = DEFAULT_SCOPES
    if isinstance(scopes, str):
        scopes = [s for s in re.split(r"[,\s]+", scopes) if s]
    wanted = {s.strip().lower() for s in scopes}
    unknown = wanted - ALL_SCOPES
    if unknown:
        raise ApiKeyError(
            f"unknown scope(s): {', '.join(sorted(unknown))}; use {', '.join(sorted(ALL_SCOPES))}"
        )
    if not wanted:
        raise ApiKeyError("a key needs at least one scope")
    if "write" in wanted:
        wanted.add("read")
    return sorted(wanted)


def parse_expiry(value: str | None, *, now: datetime | None = None) -> datetime | None:
    """'30d', '12h', '2027-01-01' (midnight UTC) or an ISO date-time; empty means never."""
    if value is None or not value.strip():
        return None
    now = now or timezone.now()
    text = value.strip()
    relative = re.fullmatch(r"(\d+)\s*([dhm])", text)
    if relative:
        amount, unit = int(relative.group(1)), relative.group(2)
        delta = {"d": timedelta(days=amount), "h": timedelta(hours=amount)}.get(
            unit, timedelta(minutes=amount)
        )
        return now + delta
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        try:
            moment = datetime.combine(date.fromisoformat(text), time())
        except ValueError as exc:
            raise ApiKeyError(
                f"expiry {text!r} is neither a duration (30d, 12h) nor a date (2027-01-01)"
            ) from exc
    if timezone.is_naive(moment):
        moment = moment.replace(tzinfo=UTC)
    return moment


def check_new_key(
    user: Any,
    team: Team,
    scopes: list[str] | tuple[str, ...] | str | None,
    expires_at: datetime | None,
) -> list[str]:
    """The key's normalised scopes, or ApiKeyError saying why such a key cannot be made.

    Also called by forms (admin), so a bad request is answered on the form before any
    service is called.
    """
    scope_list = normalise_scopes(scopes)
    if not Membership.objects.filter(user=user, team=team).exists():
        raise ApiKeyError(f"{user} is not a member of team {team.slug}")
    if expires_at is not None and expires_at <= timezone.now():
        raise ApiKeyError("the expiry is in the past")
    return scope_list


def create_key(
    user: Any,
    team: Team,
    *,
    name: str = "",
    scopes: list[str] | tuple[str, ...] | str | None = None,
    expires_at: datetime | None = None,
) -> NewKey:
    """A new key for a member of the team; the plaintext is in the result and nowhere else.

    Not audited: interfaces create keys through tenants.services.create_api_key.
    """
    scope_list = check_new_key(user, team, scopes, expires_at)
    secret = secrets.token_urlsafe(32)
    for _ in range(5):  # a prefix collision is ~1 in 10^12; try again rather than fail
        prefix = "".join(secrets.choice(_PREFIX_ALPHABET) for _ in range(PREFIX_LENGTH))
        try:
            with transaction.atomic():
                key = ApiKey.objects.create(
                    user=user,
                    team=team,
                    name=name[:100],
                    prefix=prefix,
                    secret_hash=_hash(secret),
                    scopes=scope_list,
                    expires_at=expires_at,
                )
        except IntegrityError:
            continue
        return NewKey(key=key, plaintext=f"{KEY_MARK}_{prefix}_{secret}")
    raise RuntimeError("could not find a free key prefix")


def authenticate(
    raw: str | None, *, address: str | None = None, channel: str = Channel.API
) -> ApiKey | None:
    """The key's row if `raw` is a valid, live key whose user still belongs to its team.

    Every refusal is logged with the reason and the prefix, never the secret, and leaves one
    audit row on `channel`. Raises ratelimits.RateLimited while the prefix or the address is
    locked out (checked first, so a locked-out request costs no key lookup), and for the
    failure that starts a lockout.
    """
    if not raw:
        return None
    address = clean_address(address)
    match = _KEY_RE.match(raw.strip())
    ratelimits.check_lockout(match.group(1) if match else None, address)
    if match is None:
        _refuse(ratelimits.Failure("malformed key", None, address, channel))
        return None
    prefix, secret = match.groups()
    key = _key_by_prefix.first(prefix)
    # Hash even when there is no row, so timing does not tell which prefixes exist.
    expected = key.secret_hash if key else "0" * 64
    if not hmac.compare_digest(_hash(secret), expected) or key is None:
        team = key.team if key else None  # the key's team sees someone trying its prefix
        _refuse(
            ratelimits.Failure("unknown key or wrong secret", prefix, address, channel, None, team)
        )
        return None
    reason = refusal_reason(key)
    if reason:
        _refuse(ratelimits.Failure(reason, prefix, address, channel, key.user, key.team))
        return None
    return key


# One query: the key, its user and team, and whether the user is still a member; compiled
# once (dbkit/prepared.py). The prefix is unique: no ordering (.first() would add one).
_key_by_prefix: PreparedRead[ApiKey] = PreparedRead(
    lambda prefix: (
        ApiKey.objects.select_related("user", "team")
        .annotate(member_role=_member_role())
        .filter(prefix=prefix)
        .order_by()[:1]
    ),
    "\x00key placeholder",
)


def _member_role() -> Subquery:
    """The key's user's role in the key's team (NULL once the membership is gone)."""
    memberships = Membership.objects.filter(
        user_id=OuterRef("user_id"), team_id=OuterRef("team_id")
    )
    return Subquery(memberships.values("role")[:1])


def refusal_reason(key: ApiKey) -> str | None:
    """Why an existing key may not be used right now, or None (membership from the
    `member_role` annotation when the key was read with it)."""
    if key.revoked:
        return "revoked"
    if key.expires_at is not None and key.expires_at <= timezone.now():
        return "expired"
    if not key.user.is_active:
        return "user is inactive"
    if hasattr(key, "member_role"):
        member = key.member_role is not None
    else:
        member = Membership.objects.filter(user_id=key.user_id, team_id=key.team_id).exists()
    if not member:
        return "user is no longer a member of the key's team"
    return None


def _refuse(failure: ratelimits.Failure) -> None:
    logger.warning(
        "API key refused: %s (key shk_%s, from %s)",
        failure.reason,
        failure.prefix or "?",
        failure.address or "?",
    )
    ratelimits.authentication_failed(failure)


def touch(key: ApiKey, address: str | None) -> None:
    """Remember when and from where the key was last used (at most every TOUCH_INTERVAL)."""
    address = clean_address(address)
    now = timezone.now()
    fresh = key.last_used_at is not None and now - key.last_used_at < TOUCH_INTERVAL
    if fresh and key.last_used_address == address:
        return
    ApiKey.objects.filter(pk=key.pk).update(last_used_at=now, last_used_address=address)
    key.last_used_at, key.last_used_address = now, address


def clean_address(address: str | None) -> str | None:
    """An IP address or None: the columns are inet on PostgreSQL."""
    if not address:
        return None
    try:
        return str(ipaddress.ip_address(address))
    except ValueError:
        return None


def live_key(key_id: int) -> ApiKey | None:
    """The key with this id if it may be used now (not revoked or expired, its user active
    and still in its team): for a credential minted from a key and checked on every use (the
    E2B endpoints' envd access tokens). Read as authenticate reads, in one query."""
    key = (
        ApiKey.objects.select_related("user", "team")
        .annotate(member_role=_member_role())
        .filter(pk=key_id)
        .first()
    )
    if key is None or refusal_reason(key) is not None:
        return None
    return key


def principal_for(key: ApiKey, channel: str, address: str | None = None) -> Principal:
    """Who acts with this key: its user in its team, limited to its scopes."""
    return Principal(
        user=key.user,
        team=key.team,
        channel=channel,
        source_address=clean_address(address),
        scopes=frozenset(key.scopes),
        extra={"api_key": key.prefix},
        # Read with the key in this very request (authenticate): no second membership read.
        role=getattr(key, "member_role", None),
    )


def revoke(key: ApiKey) -> None:
    """Not audited: interfaces revoke keys through tenants.services.revoke_api_key."""
    if not key.revoked:
        key.revoked, key.revoked_at = True, timezone.now()
        key.save(update_fields=["revoked", "revoked_at"])


# --- MCP sessions (tenants.models.McpSession): a session's selected sandbox ----------------

# A session's expiry is pushed forward when it is used, at most this often: not a write on
# every call that reads the selection.
SESSION_SLIDE = timedelta(minutes=5)


def session_digest(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()


def _session_lifetime() -> timedelta:
    return timedelta(hours=settings.SANDHUB_MCP_SESSION_HOURS)


def _session(key_id: int, session_id: str) -> QuerySet[McpSession]:
    return McpSession.objects.filter(key_id=key_id, digest=session_digest(session_id))


def session_selection(key_id: int, session_id: str) -> str:
    """The sandbox selected in the key's session ("" when none is, or the session expired);
    using it pushes the session's expiry forward."""
    now = timezone.now()
    row = (
        _session(key_id, session_id)
        .filter(expires_at__gt=now)
        .values_list("pk", "selected_sandbox", "expires_at")
        .first()
    )
    if row is None:
        return ""
    pk, selected, expires_at = row
    if now + _session_lifetime() - expires_at >= SESSION_SLIDE:
        McpSession.objects.filter(pk=pk).update(expires_at=now + _session_lifetime())
    return selected


def select_in_session(key_id: int, session_id: str, sandbox_id: str) -> None:
    """Make sandbox_id the session's selection ("" selects nothing), from now for a lifetime."""
    expires_at = timezone.now() + _session_lifetime()
    # update_or_create locks the row, and of two first selections at once the one whose
    # insert fails on the unique constraint updates the other's row.
    McpSession.objects.update_or_create(
        key_id=key_id,
        digest=session_digest(session_id),
        defaults={"selected_sandbox": sandbox_id, "expires_at": expires_at},
    )


def forget_in_session(key_id: int, session_id: str, sandbox_id: str) -> None:
    """Drop the session's selection if it names this (deleted) sandbox."""
    _session(key_id, session_id).filter(selected_sandbox=sandbox_id).update(selected_sandbox="")


def end_session(key_id: int, session_id: str) -> bool:
    """Forget the session (its client ended it); whether it had a row."""
    return _session(key_id, session_id).delete()[0] > 0


def sweep_sessions(now: datetime | None = None) -> int:
    """Delete the sessions past their expiry; how many."""
    return McpSession.objects.filter(expires_at__lte=now or timezone.now()).delete()[0]
