"""Previews in the service layer, on the in-memory backend with real loopback servers as the
sandbox's ports: tokens, who may open a preview, limits, previews stopping with their
sandbox, and the audit of opening one (deploy_app and stop_app: test_deploy.py). Fixtures:
tests/previews/conftest.py."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from sandboxes import services
from sandboxes.contract.errors import (
    BackendFailure,
    InvalidInput,
    NotFound,
    PermissionDenied,
    QuotaExceeded,
)
from sandboxes.models import AccessLink, CommandExecution, Preview, Sandbox, SandboxStatus
from tenants.models import AuditLog, Channel, Membership, Role, parse_port_ranges
from tenants.principal import Principal
from tests.previews.helpers import PAGE, ask, http_get

# `fresh` (tests/previews/conftest.py): no port maps or cached audits of an earlier test.
pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("fresh")]

SYSTEM = Principal.system()


def opened_rows() -> list[AuditLog]:
    return list(AuditLog.objects.filter(action="preview.opened").order_by("id"))


# --- tokens ----------------------------------------------------------------------------------


def test_a_token_opens_its_preview_and_the_app_answers(sandbox, as_alice, listening):
    link = services.get_preview_url(as_alice, sandbox, 8000)
    grant = services.authorize_preview(ask(sandbox, token=link.token))
    assert (grant.via, grant.token, grant.preview_id) == ("token", link.token, link.preview_id)
    assert grant.token_expires_at == link.expires_at
    answer = http_get(grant)
    assert answer.startswith(b"HTTP/1.0 200") and answer.endswith(PAGE)


def test_expired_forged_and_misdirected_tokens_are_not_found(sandbox, as_alice, listening):
    other = services.create_sandbox(as_alice, name="other").id
    link = services.get_preview_url(as_alice, sandbox, 8000, expires_seconds=60)
    services.get_preview_url(as_alice, sandbox, 8001)
    services.get_preview_url(as_alice, other, 8000)
    forged = link.token[:-3] + ("aaa" if not link.token.endswith("aaa") else "bbb")
    for request in [
        ask(sandbox, token=forged),
        ask(sandbox, token="not-a-token"),
        ask(sandbox, token="x" * 5000),
        ask(sandbox, 8001, token=link.token),  # another port of the same sandbox
        ask(other, token=link.token),  # the same port of another sandbox
        ask(sandbox),  # nothing at all
    ]:
        with pytest.raises(NotFound):
            services.authorize_preview(request)
    assert services.authorize_preview(ask(sandbox, token=link.token)).via == "token"
    # Its minute is up: the row's expiry decides.
    AccessLink.objects.filter(public_id=link.link_id).update(expires_at=timezone.now())
    with pytest.raises(NotFound, match="expired"):
        services.authorize_preview(ask(sandbox, token=link.token))


def test_a_stopped_previews_tokens_die_even_when_the_port_is_opened_again(
    sandbox, as_alice, listening
):
    old = services.get_preview_url(as_alice, sandbox, 8000)
    services.stop_app(as_alice, sandbox, 8000)
    with pytest.raises(NotFound):
        services.authorize_preview(ask(sandbox, token=old.token))
    new = services.get_preview_url(as_alice, sandbox, 8000)
    assert new.preview_id != old.preview_id
    with pytest.raises(NotFound):
        services.authorize_preview(ask(sandbox, token=old.token))
    assert services.authorize_preview(ask(sandbox, token=new.token)).via == "token"


def test_a_token_dies_with_its_makers_membership(sandbox, as_alice, mallory, team_a, listening):
    as_mallory = Principal(user=mallory, team=team_a, channel=Channel.API)
    link = services.get_preview_url(as_mallory, sandbox, 8000)
    assert services.authorize_preview(ask(sandbox, token=link.token)).via == "token"
    Membership.objects.filter(user=mallory).delete()
    with pytest.raises(NotFound):
        services.authorize_preview(ask(sandbox, token=link.token))


def test_token_lifetimes_are_bounded(sandbox, as_alice):
    for seconds in [0, 59, services.MAX_TOKEN_SECONDS + 1, True, "60"]:
        with pytest.raises(InvalidInput):
            services.get_preview_url(as_alice, sandbox, 8000, expires_seconds=seconds)


# --- sessions, other teams, public previews --------------------------------------------------


def test_sessions_of_members_only(sandbox, as_alice, victor, bob, listening):
    services.get_preview_url(as_alice, sandbox, 8000)
    grant = services.authorize_preview(ask(sandbox, user_id=victor.pk, session_key="s1"))
    assert (grant.via, grant.token) == ("session", None)  # a viewer may look
    with pytest.raises(NotFound):  # team B's member
        services.authorize_preview(ask(sandbox, user_id=bob.pk, session_key="s2"))
    victor.is_active = False
    victor.save()
    with pytest.raises(NotFound):
        services.authorize_preview(ask(sandbox, user_id=victor.pk, session_key="s1"))


def test_no_preview_no_running_sandbox_no_access(sandbox, as_alice, alice, listening):
    member = {"user_id": alice.pk, "session_key": "s"}
    with pytest.raises(NotFound):  # nothing opened on that port
        services.authorize_preview(ask(sandbox, **member))
    for sandbox_id, port in [("sb_0000ghost000", 8000), ("nonsense", 8000), (sandbox, 0)]:
        with pytest.raises(NotFound):
            services.authorize_preview(ask(sandbox_id, port, **member))
    services.get_preview_url(as_alice, sandbox, 8000)
    Sandbox.objects.filter(public_id=sandbox).update(status=SandboxStatus.LOST)
    with pytest.raises(NotFound):
        services.authorize_preview(ask(sandbox, **member))


def test_another_teams_principal_finds_nothing(sandbox, as_bob):
    for call in [
        lambda: services.get_preview_url(as_bob, sandbox, 8000),
        lambda: services.deploy_app(as_bob, sandbox, command="serve 8000", port=8000),
        lambda: services.stop_app(as_bob, sandbox, 8000),
        lambda: services.list_previews(as_bob, sandbox),
    ]:
        with pytest.raises(NotFound, match=f"sandbox {sandbox} not found"):
            call()
    assert not Preview.objects.exists() and not CommandExecution.objects.exists()


def test_viewers_list_but_do_not_open_deploy_or_stop(sandbox, as_alice, as_victor):
    services.get_preview_url(as_alice, sandbox, 8000)
    assert [p.port for p in services.list_previews(as_victor, sandbox)] == [8000]
    # A link to the preview already open, yes (his session shows it to him anyway).
    link = services.get_preview_url(as_victor, sandbox, 8000, expires_seconds=600)
    assert link.port == 8000 and not link.public
    for call in [
        lambda: services.get_preview_url(as_victor, sandbox, 8001),
        lambda: services.get_preview_url(as_victor, sandbox, 8000, public=False),
        lambda: services.deploy_app(as_victor, sandbox, command="serve 8001", port=8001),
        lambda: services.stop_app(as_victor, sandbox, 8000),
    ]:
        with pytest.raises(PermissionDenied, match="a viewer may not"):
            call()
    assert Preview.objects.open().count() == 1


def test_public_previews_need_the_team_flag_and_an_admin(
    sandbox, as_alice, mallory, team_a, listening
):
    as_member = Principal(user=mallory, team=team_a, channel=Channel.WEB)
    with pytest.raises(PermissionDenied, match="does not allow public previews"):
        services.get_preview_url(as_alice, sandbox, 8000, public=True)
    team_a.allow_public_previews = True
    team_a.save()
    with pytest.raises(PermissionDenied, match="owners and admins"):
        services.get_preview_url(as_member, sandbox, 8000, public=True)
    link = services.get_preview_url(as_alice, sandbox, 8000, public=True)
    assert link.public
    assert services.authorize_preview(ask(sandbox)).via == "public"
    team_a.allow_public_previews = False  # the team's flag counts at every request
    team_a.save()
    with pytest.raises(NotFound):
        services.authorize_preview(ask(sandbox))
    team_a.allow_public_previews = True
    team_a.save()
    assert not services.get_preview_url(as_member, sandbox, 8000, public=False).public
    with pytest.raises(NotFound):
        services.authorize_preview(ask(sandbox))


# --- limits ----------------------------------------------------------------------------------


def test_ports_and_count_are_limited_by_the_team(sandbox, as_alice, team_a):
    team_a.allowed_preview_ports = "3000, 8000-8001"
    team_a.max_previews_per_sandbox = 2
    team_a.save()
    for port in [80, 2999, 8002]:
        with pytest.raises(PermissionDenied, match="ports allowed: 3000, 8000-8001"):
            services.get_preview_url(as_alice, sandbox, port)
    for port in [0, 65536, "8000", None]:
        with pytest.raises(InvalidInput):
            services.get_preview_url(as_alice, sandbox, port)
    first = services.get_preview_url(as_alice, sandbox, 8000)
    assert services.get_preview_url(as_alice, sandbox, 8000).preview_id == first.preview_id
    services.get_preview_url(as_alice, sandbox, 3000)
    with pytest.raises(QuotaExceeded, match="at most 2 open previews"):
        services.get_preview_url(as_alice, sandbox, 8001)
    with pytest.raises(QuotaExceeded):
        services.deploy_app(as_alice, sandbox, command="serve 8001", port=8001)
    assert not CommandExecution.objects.filter(background=True).exists()
    services.stop_app(as_alice, sandbox, 3000)
    services.get_preview_url(as_alice, sandbox, 8001)


def test_port_ranges_are_checked():
    assert parse_port_ranges("1024-65535") == [(1024, 65535)]
    assert parse_port_ranges(" 80, 8000-8100 ,") == [(80, 80), (8000, 8100)]
    assert parse_port_ranges("") == []
    for bad in ["0-10", "10-5", "8000-70000", "http", "80-", "-80", "1 2"]:
        with pytest.raises(ValueError):
            parse_port_ranges(bad)


def test_a_team_with_bad_ranges_does_not_validate(team_a):
    team_a.allowed_preview_ports = "8000-7000"
    with pytest.raises(ValidationError):
        team_a.full_clean()
    assert not team_a.allows_preview_port(7500)


# --- the stream, activity, and the sandbox's end ---------------------------------------------


def test_the_stream_says_when_nothing_listens_and_counts_as_activity(sandbox, as_alice, alice):
    services.get_preview_url(as_alice, sandbox, 8000)
    grant = services.authorize_preview(ask(sandbox, user_id=alice.pk, session_key="s"))
    long_ago = timezone.now() - timedelta(hours=1)
    Sandbox.objects.filter(public_id=sandbox).update(last_activity_at=long_ago)
    with pytest.raises(BackendFailure, match="nothing answers on port 8000"):
        services.open_preview_stream(grant)
    assert Sandbox.objects.get(public_id=sandbox).last_activity_at == long_ago


def test_preview_traffic_keeps_the_sandbox_from_the_idle_sweep(
    sandbox, as_alice, alice, team_a, listening
):
    services.get_preview_url(as_alice, sandbox, 8000)
    grant = services.authorize_preview(ask(sandbox, user_id=alice.pk, session_key="s"))
    long_ago = timezone.now() - timedelta(minutes=team_a.idle_timeout_minutes + 5)
    Sandbox.objects.filter(public_id=sandbox).update(last_activity_at=long_ago)
    assert http_get(grant).endswith(PAGE)
    assert Sandbox.objects.get(public_id=sandbox).last_activity_at > long_ago
    assert services.sweep_expired_and_idle(SYSTEM).idle == []
    # A connection that stays open (a websocket) keeps it active as the proxy reports it.
    Sandbox.objects.filter(public_id=sandbox).update(last_activity_at=long_ago)
    services.record_preview_activity(grant)
    assert Sandbox.objects.get(public_id=sandbox).last_activity_at > long_ago
    assert services.sweep_expired_and_idle(SYSTEM).idle == []


def test_deleting_the_sandbox_stops_its_previews(sandbox, as_alice, listening):
    link = services.get_preview_url(as_alice, sandbox, 8000)
    services.delete_sandbox(as_alice, sandbox)
    assert Preview.objects.get(pk=link.preview_id).stop_reason == "its sandbox was deleted"
    with pytest.raises(NotFound):
        services.authorize_preview(ask(sandbox, token=link.token))


def test_the_sweep_stops_the_previews_of_sandboxes_it_removes(sandbox, as_alice):
    link = services.get_preview_url(as_alice, sandbox, 8000)
    Sandbox.objects.filter(public_id=sandbox).update(expires_at=timezone.now())
    assert services.sweep_expired_and_idle(SYSTEM).expired == [sandbox]
    assert Preview.objects.get(pk=link.preview_id).stopped_at is not None


# --- the audit of opening a preview ----------------------------------------------------------


def test_opening_is_audited_once_per_session_and_per_token(
    sandbox, as_alice, alice, listening, team_a
):
    link = services.get_preview_url(as_alice, sandbox, 8000)
    other = services.get_preview_url(as_alice, sandbox, 8000, expires_seconds=600)
    assert other.token != link.token
    assert AuditLog.objects.filter(action="preview.open").count() == 2
    for _ in range(3):
        services.authorize_preview(ask(sandbox, token=link.token))
        services.authorize_preview(ask(sandbox, user_id=alice.pk, session_key="one"))
    services.authorize_preview(ask(sandbox, token=other.token))
    services.authorize_preview(ask(sandbox, user_id=alice.pk, session_key="two"))
    rows = opened_rows()
    assert [r.details["via"] for r in rows] == ["token", "session", "token", "session"]
    by_token = rows[0]
    assert (by_token.actor, by_token.team, by_token.target_id) == (None, team_a, sandbox)
    assert by_token.details["created_by"] == "alice"
    assert str(by_token.source_address) == "10.0.0.9"
    assert rows[1].actor == alice


def test_public_visitors_are_audited_once_per_address(sandbox, as_alice, team_a, listening):
    team_a.allow_public_previews = True
    team_a.save()
    services.get_preview_url(as_alice, sandbox, 8000, public=True)
    for address in ["10.0.0.1", "10.0.0.1", "10.0.0.2", "not an address"]:
        services.authorize_preview(ask(sandbox, address=address))
    rows = opened_rows()
    assert [str(r.source_address) for r in rows] == ["10.0.0.1", "10.0.0.2", "None"]


def test_list_previews_shows_the_open_ones_by_port(sandbox, as_alice, mallory, team_a):
    as_member = Principal(user=mallory, team=team_a, channel=Channel.WEB, role=Role.MEMBER)
    services.get_preview_url(as_member, sandbox, 9000)
    services.get_preview_url(as_alice, sandbox, 8000)
    services.get_preview_url(as_alice, sandbox, 8080)
    services.stop_app(as_alice, sandbox, 8080)
    listed = services.list_previews(as_alice, sandbox)
    assert [(p.port, p.created_by, p.stopped_at) for p in listed] == [
        (8000, "alice", None),
        (9000, "mallory", None),
    ]


def test_admin_lists_previews_read_only_and_edits_the_team_limits(
    admin_client, sandbox, as_alice, team_a
):
    link = services.get_preview_url(as_alice, sandbox, 8000)
    listing = admin_client.get("/admin/sandboxes/preview/")
    assert listing.status_code == 200 and sandbox.encode() in listing.content
    page = admin_client.get(f"/admin/sandboxes/preview/{link.preview_id}/change/")
    assert page.status_code == 200 and b'name="port"' not in page.content  # read-only
    assert admin_client.get("/admin/sandboxes/preview/add/").status_code == 403
    team = admin_client.get(f"/admin/tenants/team/{team_a.pk}/change/")
    for field in [b"allowed_preview_ports", b"max_previews_per_sandbox", b"allow_public_previews"]:
        assert b'name="' + field + b'"' in team.content
