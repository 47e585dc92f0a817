"""Who may read /metrics (issue 28): an operator's route, not a team's. It is no REST route
(the tenancy matrix walks sandboxes/api/urls.py's) and takes no team's credential: only the
bearer token of SANDHUB_METRICS_TOKEN. Every team credential there is, on every channel
(a logged-in session of each role and of a superuser, a read-write and a read-only API key,
as a bearer or a cookie), is answered 401 with no metric in the body; wrong tokens count
towards the per-address lockout API keys have, each with an audit row that never holds what
was sent.

The live web process for the credentials; the ASGI app called directly for the lockout,
with a client address that is not loopback (loopback is exempt from per-address limits)."""

from __future__ import annotations

import asyncio
import secrets

import httpx2 as httpx
import pytest
from django.contrib.auth import get_user_model
from django.core.cache import caches
from django.test import Client as DjangoClient

from tenants import ratelimits
from tenants.models import AuditLog

TOKEN = secrets.token_urlsafe(32)
ATTACKER = "198.51.100.9"  # a documentation address: nothing is sent anywhere
# The operator-only routes the web process serves outside Django's URL resolver, and what
# each one requires.
OPERATOR_ROUTES = {"/metrics": "the SANDHUB_METRICS_TOKEN bearer token"}


@pytest.fixture(autouse=True)
def metrics_on(settings, world):
    settings.SANDHUB_METRICS_TOKEN = TOKEN
    caches[ratelimits.CACHE_ALIAS].clear()
    yield
    caches[ratelimits.CACHE_ALIAS].clear()


def _session(user) -> str:
    client = DjangoClient()
    client.force_login(user)
    return client.cookies["sessionid"].value


def _superuser():
    user, _ = get_user_model().objects.get_or_create(
        username="root-metrics", defaults={"is_staff": True, "is_superuser": True}
    )
    return user


def team_credentials(world) -> dict[str, dict[str, str]]:
    """Every credential a team member has, as the headers and cookies a client would send."""
    credentials: dict[str, dict[str, str]] = {}
    for name in ("alice", "alice_read", "victor", "bob"):
        key = world.keys[name]
        credentials[f"{name}'s API key as bearer"] = {"authorization": f"Bearer {key}"}
        credentials[f"{name}'s API key as cookie"] = {"cookie": f"sessionid={key}"}
    for label, user in (("owner", world.alice), ("viewer", world.victor), ("superuser", None)):
        session = _session(user or _superuser())
        credentials[f"{label}'s session"] = {"cookie": f"sessionid={session}"}
        credentials[f"{label}'s session as bearer"] = {"authorization": f"Bearer {session}"}
    return credentials


@pytest.mark.parametrize("path", sorted(OPERATOR_ROUTES))
def test_no_team_credential_reads_operator_routes(asgi_server, world, path):
    refused = {}
    for what, headers in team_credentials(world).items():
        answer = httpx.get(f"{asgi_server}{path}", headers=headers)
        refused[what] = (answer.status_code, "sandhub_" in answer.text)
    assert refused == {what: (401, False) for what in refused}, OPERATOR_ROUTES[path]
    right = httpx.get(f"{asgi_server}{path}", headers={"authorization": f"Bearer {TOKEN}"})
    assert right.status_code == 200
    assert "sandhub_sandboxes" in right.text


async def _get(headers: dict[str, str]) -> httpx.Response:
    from platform_site.asgi import application

    transport = httpx.ASGITransport(app=application, client=(ATTACKER, 40000))
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
        return await client.get("/metrics", headers=headers)


def test_wrong_tokens_lock_the_address_out(settings, world):
    settings.SANDHUB_AUTH_FAILURES_PER_ADDRESS = 3
    before = AuditLog.objects.count()
    guesses = [secrets.token_urlsafe(32) for _ in range(4)]
    statuses = [asyncio.run(_get({"authorization": f"Bearer {g}"})).status_code for g in guesses]
    assert statuses == [401, 401, 401, 429]
    # Locked out: the right token waits too (the lockout is the address's, as for API keys).
    locked = asyncio.run(_get({"authorization": f"Bearer {TOKEN}"}))
    assert locked.status_code == 429
    assert int(locked.headers["retry-after"]) > 0
    assert "sandhub_" not in locked.text
    rows = list(AuditLog.objects.order_by("pk")[before:])
    assert [row.action for row in rows] == ["apikey.auth"] * 3 + ["apikey.lockout"]
    assert all(row.details["reason"] == "bad metrics token" for row in rows)
    assert all(row.source_address == ATTACKER for row in rows)
    recorded = str([(row.details, row.target_id) for row in rows])
    assert not any(guess in recorded for guess in guesses)
