"""The proxy's view of the database (issue 27): which sandbox a connection comes from, what
it may reach, the secrets bound to destinations, and where refusals are counted.

The proxy calls these from worker threads (egress.policy.PolicySource): each call closes its
database connection after itself, as a request would (nothing else would close it). The
team's policy is read afresh on every lookup, so lowering it applies at once (the proxy
keeps a policy for a second or two)."""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from django.db import IntegrityError, close_old_connections, connection, transaction
from django.db.models import F
from django.utils import timezone

from hosts import crypto
from hosts.models import Host
from sandboxes.models import LIVE_STATUSES, EgressRefusal, Sandbox
from sandboxes.services import egress, egress_rules, egress_secrets

if TYPE_CHECKING:
    from egress.policy import BoundSecret, SandboxPolicy

logger = logging.getLogger(__name__)
T = TypeVar("T")
# The engine on this machine: the proxy and its firewall rules are here, so only its
# sandboxes are found by their address (any other's connection would not come from it).
LOCAL_ENGINE_PREFIXES = ("unix://", "npipe://")
# What a missing sandbox's token is compared with (no token matches it: see _by_token).
_NO_TOKEN = b"\x00no token"


def _fresh(fn: Callable[[], T]) -> T:
    """fn() with the thread's connection closed after it (and a stale one before), as a
    request would; a caller inside a transaction of its own keeps its connection."""
    if connection.in_atomic_block:
        return fn()
    close_old_connections()
    try:
        return fn()
    finally:
        close_old_connections()


class DatabasePolicySource:
    """egress.policy.PolicySource over the platform's database."""

    def by_address(self, address: str) -> SandboxPolicy | None:
        """The live sandbox on this machine's Docker engine with that address on its network."""
        return _fresh(lambda: _by_address(address))

    def by_token(self, sandbox_id: str, token: str) -> SandboxPolicy | None:
        """The live sandbox with that id, if the token is its credential."""
        return _fresh(lambda: _by_token(sandbox_id, token))

    def report(self, refusals: dict[tuple[str, str, str], int]) -> None:
        """Add the counts to the sandboxes' refusal rows (one row per destination and reason)."""
        _fresh(lambda: _report(refusals))


def _by_address(address: str) -> SandboxPolicy | None:
    if not isinstance(address, str) or not address:
        return None
    found = list(
        Sandbox.objects.filter(status__in=LIVE_STATUSES, host__kind=Host.Kind.DOCKER)
        .exclude(egress_mode=egress.OFF)
        .filter(backend_state__egress_address=address)
        .select_related("team", "host")[:2]
    )
    local = [s for s in found if (s.host and s.host.endpoint.startswith(LOCAL_ENGINE_PREFIXES))]
    if len(local) != 1:  # none, or an address two rows claim (a stale one): trust neither
        return None
    return policy_of(local[0])


def _by_token(sandbox_id: str, token: str) -> SandboxPolicy | None:
    if not isinstance(sandbox_id, str) or not isinstance(token, str) or not token:
        return None
    sandbox = (
        Sandbox.objects.filter(public_id=sandbox_id, status__in=LIVE_STATUSES)
        .exclude(egress_mode=egress.OFF)
        .select_related("team")
        .first()
    )
    expected = sandbox.egress_token if sandbox is not None else ""
    # Compared whatever was found, in constant time: a wrong id and a wrong token look alike.
    matches = hmac.compare_digest(expected.encode() or _NO_TOKEN, token.encode())
    if sandbox is None or not expected or not matches:
        return None
    return policy_of(sandbox)


def policy_of(sandbox: Sandbox) -> SandboxPolicy | None:
    """What the sandbox may reach under its team's policy as it is now: its mode capped by
    the team's, its rules those the team's list still covers; None if it may reach nothing."""
    from egress.policy import SandboxPolicy  # on use: see egress_rules.parse

    team = sandbox.team
    mode = sandbox.egress_mode
    if mode not in (egress.ALLOWLIST, egress.PUBLIC) or egress.rank(mode) > egress.rank(
        egress.team_ceiling(team)
    ):
        return None
    rules = ()
    if mode == egress.ALLOWLIST:
        team_rules = _rules(team.egress_allowlist)
        own = _rules(sandbox.egress_allow)
        rules = tuple(r for r in own if any(egress_rules.covers(t, r) for t in team_rules))
    return SandboxPolicy(
        sandbox_id=sandbox.public_id,
        mode=mode,
        rules=rules,
        allowed_ranges=tuple(str(r) for r in team.egress_allowed_ranges or []),
        secrets=_secrets(sandbox),
        dns_answer=str(sandbox.backend_state.get("egress_gateway", "")),
        gateway=str(sandbox.backend_state.get("egress_gateway", "")),
    )


def _rules(texts: object) -> list:
    rules = []
    for text in texts if isinstance(texts, list) else []:
        try:
            rules.append(egress_rules.parse(text, "rule"))
        except Exception:  # a row edited around validation: that rule allows nothing
            logger.warning("ignoring an unreadable egress rule %r", text)
    return rules


def _secrets(sandbox: Sandbox) -> tuple[BoundSecret, ...]:
    from egress.policy import BoundSecret

    bound = []
    for secret in egress_secrets.applicable(sandbox.team_id, sandbox.owner_id):
        try:
            value = egress_secrets.header_value(secret)
        except crypto.CredentialKeyError:
            logger.warning("egress secret %s cannot be decrypted: not sent", secret.pk)
            continue
        bound.append(
            BoundSecret(
                name=secret.name,
                hosts=tuple(secret.hosts),
                header=secret.header,
                value=value,
                placeholder=secret.placeholder,
            )
        )
    return tuple(bound)


def _report(refusals: dict[tuple[str, str, str], int]) -> None:
    ids = {sandbox_id for sandbox_id, _, _ in refusals}
    pks = dict(Sandbox.objects.filter(public_id__in=ids).values_list("public_id", "pk"))
    now = timezone.now()
    for (sandbox_id, destination, reason), count in refusals.items():
        pk = pks.get(sandbox_id)
        if pk is None or count <= 0:
            continue
        _count(pk, destination[:300], reason[:100], count, now)


def _count(sandbox_pk: int, destination: str, reason: str, count: int, now) -> None:
    """One statement: the row's count raised, or the row made (a concurrent maker wins the
    insert, and then this adds to its row)."""
    key = {"sandbox_id": sandbox_pk, "destination": destination, "reason": reason}
    rows = EgressRefusal.objects.filter(**key)
    if rows.update(count=F("count") + count, last_at=now):
        return
    try:
        with transaction.atomic():
            EgressRefusal.objects.create(**key, count=count, first_at=now, last_at=now)
    except IntegrityError:
        rows.update(count=F("count") + count, last_at=now)
