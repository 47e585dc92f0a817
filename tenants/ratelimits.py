"""Rate limits, lockouts and the record of refused requests.

Counting is django-ratelimit's (fixed windows, `get_usage`) in the "ratelimit" cache: a
database cache (settings.CACHES), so every web process and worker counts together (the
default cache is per process). `migrate` creates its table (`create_cache_table`, run on
post_migrate); Django's test runner does too. Django's DatabaseCache increments by read then
write, so parallel requests would each count once for many: `RateLimitCache` locks the row.

Authentication failures (tenants.apikeys.authenticate) count against the key's prefix and
the source address. More than SANDHUB_AUTH_FAILURES_PER_KEY (per address:
SANDHUB_AUTH_FAILURES_PER_ADDRESS) within SANDHUB_AUTH_FAILURE_WINDOW_SECONDS locks that
prefix (address) for SANDHUB_AUTH_LOCKOUT_SECONDS: every request with a key of that prefix
(from that address) is refused with RateLimited (REST and MCP: HTTP 429 and Retry-After),
the right key too, since the lockout cannot tell its owner from whoever is guessing. The
lockout writes ONE audit row (apikey.lockout); the requests it refuses write none.

Creations (sandboxes, API keys) are limited per API key (a signed-in user without a key: per
user) and per source address, SANDHUB_CREATION_LIMITS per action; the system and platform
admins are not limited. The first refusal of a window writes one audit row for all of them.

Addresses in SANDHUB_RATELIMIT_EXEMPT_ADDRESSES (loopback by default: a reverse proxy on the
same machine without --proxy-headers makes every client look like 127.0.0.1, and one
address's lockout would lock everyone out) are never counted or locked per address; the
per-key limits still apply to them.

Refused requests: every refusal leaves exactly one audit row. Services write their own; the
interfaces (REST, MCP) refuse some requests before any service runs (malformed input, an
unknown tool) and record those with `record_refusal` when `watching_audit_rows` saw no row.
"""

from __future__ import annotations

import base64
import functools
import math
import pickle
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, ParamSpec, TypeVar

from django.conf import settings
from django.core.cache import caches
from django.core.cache.backends.base import DEFAULT_TIMEOUT
from django.core.cache.backends.db import DatabaseCache
from django.core.management import call_command
from django.db import connections, router, transaction
from django.db.models.signals import post_migrate, post_save
from django.utils import timezone
from django_ratelimit.core import get_usage  # type: ignore[import-untyped]

from tenants import audit
from tenants.errors import ServiceError
from tenants.models import AuditLog, Team
from tenants.principal import Principal

P = ParamSpec("P")
R = TypeVar("R")

CACHE_ALIAS = "ratelimit"


class RateLimited(ServiceError):
    """Too many attempts: try again in `retry_after` seconds (HTTP 429, Retry-After)."""

    code = "rate_limited"
    http_status = 429

    def __init__(self, message: str, retry_after: float) -> None:
        self.retry_after = max(1, math.ceil(retry_after))
        super().__init__(f"{message}; try again in {self.retry_after} s")


class RateLimitCache(DatabaseCache):
    """Django's database cache with an atomic increment: the row is locked (SELECT ... FOR
    UPDATE on PostgreSQL; SQLite's IMMEDIATE transactions serialise writers anyway), and its
    expiry is kept rather than reset to the default timeout."""

    def add(
        self, key: Any, value: Any, timeout: Any = DEFAULT_TIMEOUT, version: Any = None
    ) -> bool:
        # django-ratelimit adds a window's counter before each increment; once the window
        # has one, that add is a read, not a write transaction of its own (on SQLite, one
        # writer at a time: a count is then one write, not two).
        if self.has_key(key, version=version):
            return False
        return super().add(key, value, timeout, version)

    def incr(self, key: Any, delta: int = 1, version: int | None = None) -> Any:
        key = self.make_and_validate_key(key, version=version)
        db = router.db_for_write(self.cache_model_class)
        connection = connections[db]
        quote = connection.ops.quote_name
        table, name, value, expires = (
            quote(n)
            for n in (self._table, "cache_key", "value", "expires")  # type: ignore[attr-defined]
        )
        lock = " FOR UPDATE" if connection.features.has_select_for_update else ""
        now = connection.ops.adapt_datetimefield_value(timezone.now().replace(microsecond=0))
        with transaction.atomic(using=db), connection.cursor() as cursor:
            cursor.execute(
                f"SELECT {value} FROM {table} WHERE {name} = %s AND {expires} >= %s{lock}",
                [key, now],
            )
            row = cursor.fetchone()
            if row is None:
                raise ValueError(f"Key '{key}' not found")
            number = pickle.loads(base64.b64decode(row[0].encode())) + delta
            encoded = base64.b64encode(pickle.dumps(number, self.pickle_protocol)).decode("latin1")
            cursor.execute(f"UPDATE {table} SET {value} = %s WHERE {name} = %s", [encoded, key])
        return number


def create_cache_table(sender: Any, using: str = "default", **kwargs: Any) -> None:
    """post_migrate (sent once per app: acted on for tenants'): the database caches' tables,
    which createcachetable makes only where they are missing."""
    if getattr(sender, "label", None) == "tenants":
        call_command("createcachetable", database=using, verbosity=0)


post_migrate.connect(create_cache_table, dispatch_uid="sandhub-ratelimit-cache-table")


def _cache() -> Any:
    return caches[CACHE_ALIAS]


def _exempt(address: str | None) -> bool:
    return not address or address in settings.SANDHUB_RATELIMIT_EXEMPT_ADDRESSES


def _count(group: str, value: str, limit: int, period: int) -> tuple[int, int]:
    """Count one more event of `group` for `value`: (events in this window, seconds left)."""
    usage = get_usage(
        None, group=group, key=lambda _group, _request: value, rate=(limit, period), increment=True
    )
    if usage is None:  # RATELIMIT_ENABLE is off
        return 0, 0
    if usage["limit"] == 0:  # the cache failed: over the limit (fail closed), no lockout
        return limit + 2, period
    # time_left is the window's end less the clock read a moment later: -1 when the window
    # ended in between (it was taken for a cache failure, and refused a legitimate call).
    return int(usage["count"]), max(int(usage["time_left"]), 1)


def _moment(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=UTC).isoformat(timespec="seconds")


# --- authentication failures and lockouts ----------------------------------------------------


def _lock_key(scope: str, value: str) -> str:
    return f"sandhub:lockout:{scope}:{value}"


def check_lockout(prefix: str | None, address: str | None) -> None:
    """RateLimited if the key prefix or the address is locked out (before any key is read)."""
    keys = {}
    if prefix:
        keys[_lock_key("key", prefix)] = f"API key shk_{prefix}"
    if not _exempt(address):
        keys[_lock_key("address", str(address))] = f"address {address}"
    if not keys:
        return
    for lock, until in _cache().get_many(list(keys)).items():
        left = float(until) - time.time()
        if left > 0:
            raise RateLimited(
                f"too many failed authentications: {keys[lock]} is locked out until "
                f"{_moment(float(until))}",
                left,
            )


@dataclass(frozen=True)
class Failure:
    """One failed authentication: why, with which key prefix (if it had one), from where."""

    reason: str
    prefix: str | None
    address: str | None
    channel: str
    actor: Any = None  # the key's user, when the secret was right (revoked, expired, ...)
    team: Team | None = None  # the key's team, when the prefix names a key


def authentication_failed(failure: Failure) -> None:
    """Count the failure. Over a limit it starts a lockout: one apikey.lockout row is written
    for it and RateLimited raised; otherwise one apikey.auth row records this refusal."""
    window = settings.SANDHUB_AUTH_FAILURE_WINDOW_SECONDS
    scopes = []
    if failure.prefix:
        scopes.append(("key", failure.prefix, settings.SANDHUB_AUTH_FAILURES_PER_KEY))
    if not _exempt(failure.address):
        scopes.append(("address", str(failure.address), settings.SANDHUB_AUTH_FAILURES_PER_ADDRESS))
    started = []
    for scope, value, limit in scopes:
        count, _ = _count(f"sandhub.auth-failures.{scope}", value, limit, window)
        # Exactly one request makes the count limit + 1 (the increment is atomic): it alone
        # starts the lockout and writes its row.
        if count == limit + 1:
            until = time.time() + settings.SANDHUB_AUTH_LOCKOUT_SECONDS
            _cache().set(_lock_key(scope, value), until, settings.SANDHUB_AUTH_LOCKOUT_SECONDS)
            started.append((scope, value, limit, until))
    details: dict[str, Any] = {"reason": failure.reason}
    if failure.prefix:
        details["api_key"] = failure.prefix
    row = Principal(
        user=failure.actor,
        team=failure.team,
        channel=failure.channel,
        source_address=failure.address,
    )
    if not started:
        audit.record(
            row,
            "apikey.auth",
            target_type="apikey",
            target_id=failure.prefix or "",
            outcome="refused",
            details=details,
        )
        return
    details["lockouts"] = [
        {"per": scope, "value": value, "failures": limit + 1, "until": _moment(until)}
        for scope, value, limit, until in started
    ]
    details["note"] = (
        f"more than the allowed failed authentications within {window} s; requests refused "
        "during the lockout are not recorded one by one"
    )
    audit.record(
        row,
        "apikey.lockout",
        target_type="apikey",
        target_id=failure.prefix or "",
        outcome=RateLimited.code,
        details=details,
    )
    scope, value, _, until = started[0]
    what = f"API key shk_{value}" if scope == "key" else f"address {value}"
    raise RateLimited(
        f"too many failed authentications: {what} is locked out until {_moment(until)}",
        until - time.time(),
    )


# --- creations -------------------------------------------------------------------------------


def check_creation(principal: Principal, action: str) -> None:
    """Count one `action` (e.g. sandbox.create) by the principal; RateLimited over a limit.

    The first refusal of a window writes one audit row for the action; later ones none.
    """
    limits = settings.SANDHUB_CREATION_LIMITS.get(action)
    if limits is None or principal.is_platform_admin:
        return
    per_key, per_address, window = limits
    key = principal.extra.get("api_key")
    identity = f"key:{key}" if key else (f"user:{principal.user.pk}" if principal.user else "")
    scopes = []
    if identity:
        scopes.append(("API key" if key else "user", identity, per_key))
    if not _exempt(principal.source_address):
        scopes.append(("address", f"address:{principal.source_address}", per_address))
    for scope, value, limit in scopes:
        count, left = _count(f"sandhub.create.{action}", value, limit, window)
        if count <= limit:
            continue
        error = RateLimited(
            f"rate limit: at most {limit} {action} per {window} s per {scope}", left
        )
        if count == limit + 1:
            details: dict[str, Any] = {
                "error": error.message,
                "per": scope,
                "until": _moment(time.time() + left),
                "note": "further refusals in this window are not recorded one by one",
            }
            if key:
                details["api_key"] = key
            audit.record(principal, action, outcome=error.code, details=details)
        raise error


def rate_limited(action: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Decorates a creating service, above its `audited`: a call over the limit is refused
    before the service's own audit row (check_creation writes the summary).

    `unaudited` (what workflows call to run a service inside their own audited call) is the
    service's body with the check, so a workflow's creations count too.
    """

    def decorate(service: Callable[P, R]) -> Callable[P, R]:
        def checked(inner: Callable[P, R]) -> Callable[P, R]:
            @functools.wraps(inner)
            def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
                principal = args[0]
                assert isinstance(principal, Principal), "services take the principal first"
                check_creation(principal, action)
                return inner(*args, **kwargs)

            return wrapper

        outer = checked(service)
        body = getattr(service, "unaudited", None)
        if body is not None:
            outer.unaudited = checked(body)  # type: ignore[attr-defined]
        return outer

    return decorate


# --- refused requests on record --------------------------------------------------------------


@dataclass
class RowWatch:
    rows: int = 0  # audit rows written since the watch began


_watch: ContextVar[RowWatch | None] = ContextVar("sandhub_audit_row_watch", default=None)


def _count_row(sender: Any, created: bool = False, **kwargs: Any) -> None:
    watch = _watch.get()
    if created and watch is not None:
        watch.rows += 1


post_save.connect(_count_row, sender=AuditLog, dispatch_uid="sandhub-audit-row-watch")


@contextmanager
def watching_audit_rows() -> Iterator[RowWatch]:
    """Counts the audit rows written while one request is handled (in this context and in the
    worker threads it starts, which copy it)."""
    watch = RowWatch()
    token = _watch.set(watch)
    try:
        yield watch
    finally:
        _watch.reset(token)


def record_refusal(
    principal: Principal, target: str, outcome: str, error: str, watch: RowWatch | None
) -> None:
    """One request.refused row for a request refused before any service ran, unless the
    request already left a row (a service's, or an authentication failure's)."""
    if watch is not None and watch.rows:
        return
    details: dict[str, Any] = {"error": error[:1000].replace("\x00", "\\x00")}
    if principal.extra.get("api_key"):
        details["api_key"] = principal.extra["api_key"]
    audit.record(
        principal,
        "request.refused",
        target_type="endpoint",
        target_id=target[:64],
        outcome=outcome[:16],
        details=details,
    )


def anonymous(channel: str, address: str | None) -> Principal:
    """Whoever sent a request that names no valid key or user."""
    return Principal(user=None, team=None, channel=channel, source_address=address)
