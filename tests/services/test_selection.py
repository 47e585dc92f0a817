"""The sandbox an MCP session selected (sandboxes/services/selection.py, tenants.apikeys'
session rows), with the in-memory backend: per session, never per key; per key, never shared
by a session id; expiring; swept; nothing without a session."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from sandboxes import services
from sandboxes.contract.errors import InvalidInput, NotFound
from sandboxes.housekeeping.sweep import sweep
from sandboxes.services import selection
from tenants import apikeys
from tenants.models import ApiKey, AuditLog, Channel, McpSession

pytestmark = pytest.mark.django_db

ONE, TWO = "session-one-" + "a" * 32, "session-two-" + "b" * 32


@pytest.fixture
def sandbox(fake_backend, as_alice):
    return services.create_sandbox(as_alice, name="work")


@pytest.fixture
def other(fake_backend, as_alice):
    return services.create_sandbox(as_alice, name="other")


@pytest.fixture
def key(alice, team_a) -> ApiKey:
    return apikeys.create_key(alice, team_a, name="agent").key


@pytest.fixture
def as_key(key):
    return apikeys.principal_for(key, Channel.MCP)


def last_id() -> int:
    return AuditLog.objects.order_by("-id").values_list("id", flat=True).first() or 0


@pytest.mark.audit_views
def test_select_and_get_the_active_sandbox(sandbox, key, as_key):
    start = last_id()
    assert selection.get_active_sandbox(as_key, key.pk, ONE) is None
    selected = selection.select_sandbox(as_key, key.pk, ONE, sandbox.id)
    assert selected is not None and selected.id == sandbox.id
    assert selection.selected_sandbox(as_key, key.pk, ONE) == sandbox.id
    active = selection.get_active_sandbox(as_key, key.pk, ONE)
    assert active is not None and active.id == sandbox.id
    rows = list(AuditLog.objects.filter(id__gt=start).order_by("id"))
    assert [(r.action, r.outcome) for r in rows] == [
        ("sandbox.active", "ok"),
        ("sandbox.get", "ok"),
        ("sandbox.get", "ok"),
    ]
    assert rows[1].details["selected"] == sandbox.id and rows[1].target_id == sandbox.id
    assert selection.select_sandbox(as_key, key.pk, ONE, None) is None
    assert selection.selected_sandbox(as_key, key.pk, ONE) == ""


def test_two_sessions_of_one_key_each_have_their_own(sandbox, other, key, as_key):
    selection.select_sandbox(as_key, key.pk, ONE, sandbox.id)
    selection.select_sandbox(as_key, key.pk, TWO, other.id)
    assert selection.selected_sandbox(as_key, key.pk, ONE) == sandbox.id
    assert selection.selected_sandbox(as_key, key.pk, TWO) == other.id
    # Only digests are stored, never the ids.
    assert set(McpSession.objects.values_list("digest", flat=True)) == {
        apikeys.session_digest(ONE),
        apikeys.session_digest(TWO),
    }
    assert ONE not in str(list(McpSession.objects.values()))


def test_the_same_session_id_with_another_key_sees_nothing(sandbox, key, as_key, alice, team_a):
    second = apikeys.create_key(alice, team_a, name="second").key
    as_second = apikeys.principal_for(second, Channel.MCP)
    selection.select_sandbox(as_key, key.pk, ONE, sandbox.id)
    assert selection.selected_sandbox(as_second, second.pk, ONE) == ""
    assert selection.get_active_sandbox(as_second, second.pk, ONE) is None
    assert selection.selected_sandbox(as_key, key.pk, ONE) == sandbox.id


def test_without_a_session_nothing_is_selected_and_select_says_why(sandbox, key, as_key):
    with pytest.raises(InvalidInput) as refused:
        selection.select_sandbox(as_key, key.pk, None, sandbox.id)
    assert "pass sandbox_id" in refused.value.message and "no session" in refused.value.message
    assert selection.get_active_sandbox(as_key, key.pk, None) is None
    assert selection.selected_sandbox(as_key, key.pk, None) == ""
    assert selection.remember_created(as_key, key.pk, None, sandbox.id) is False
    assert not McpSession.objects.exists()


def test_an_expired_session_selects_nothing_and_the_sweep_removes_it(sandbox, key, as_key):
    selection.select_sandbox(as_key, key.pk, ONE, sandbox.id)
    selection.select_sandbox(as_key, key.pk, TWO, sandbox.id)
    McpSession.objects.filter(digest=apikeys.session_digest(ONE)).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert selection.selected_sandbox(as_key, key.pk, ONE) == ""
    assert selection.get_active_sandbox(as_key, key.pk, ONE) is None
    report = sweep()
    assert report.expired_mcp_sessions == 1
    assert list(McpSession.objects.values_list("digest", flat=True)) == [
        apikeys.session_digest(TWO)
    ]


def test_use_pushes_the_expiry_forward(sandbox, key, as_key, settings):
    selection.select_sandbox(as_key, key.pk, ONE, sandbox.id)
    soon = timezone.now() + timedelta(minutes=30)
    McpSession.objects.update(expires_at=soon)
    assert selection.selected_sandbox(as_key, key.pk, ONE) == sandbox.id
    expires_at = McpSession.objects.get().expires_at
    hours = timedelta(hours=settings.SANDHUB_MCP_SESSION_HOURS)
    assert expires_at > timezone.now() + hours - timedelta(minutes=1)


def test_a_deleted_selection_is_dropped(sandbox, key, as_key, as_alice):
    selection.select_sandbox(as_key, key.pk, ONE, sandbox.id)
    services.delete_sandbox(as_alice, sandbox.id)
    assert selection.get_active_sandbox(as_key, key.pk, ONE) is None
    assert McpSession.objects.get().selected_sandbox == ""


def test_created_and_deleted_sandboxes_follow_the_selection(sandbox, key, as_key):
    assert selection.remember_created(as_key, key.pk, ONE, sandbox.id) is True
    assert selection.selected_sandbox(as_key, key.pk, ONE) == sandbox.id
    selection.forget_deleted(as_key, key.pk, ONE, "sb_other000000")
    selection.forget_deleted(as_key, key.pk, TWO, sandbox.id)
    assert selection.selected_sandbox(as_key, key.pk, ONE) == sandbox.id
    selection.forget_deleted(as_key, key.pk, ONE, sandbox.id)
    assert selection.selected_sandbox(as_key, key.pk, ONE) == ""


def test_ending_a_session_forgets_it(sandbox, key, as_key):
    selection.select_sandbox(as_key, key.pk, ONE, sandbox.id)
    selection.select_sandbox(as_key, key.pk, TWO, sandbox.id)
    assert selection.end_session(as_key, key.pk, ONE) is True
    assert selection.end_session(as_key, key.pk, ONE) is False
    assert selection.selected_sandbox(as_key, key.pk, ONE) == ""
    assert selection.selected_sandbox(as_key, key.pk, TWO) == sandbox.id


def test_a_deleted_key_takes_its_sessions(sandbox, key, as_key):
    selection.select_sandbox(as_key, key.pk, ONE, sandbox.id)
    key.delete()
    assert not McpSession.objects.exists()


def test_another_teams_sandbox_or_key_is_not_found(sandbox, key, bob, team_b):
    bobs = apikeys.create_key(bob, team_b).key
    as_bob = apikeys.principal_for(bobs, Channel.MCP)
    with pytest.raises(NotFound):
        selection.select_sandbox(as_bob, bobs.pk, ONE, sandbox.id)
    with pytest.raises(NotFound):
        selection.get_active_sandbox(as_bob, key.pk, ONE)
    with pytest.raises(NotFound):
        selection.end_session(as_bob, key.pk, ONE)
    assert not McpSession.objects.exists()
