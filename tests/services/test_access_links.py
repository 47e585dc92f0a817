"""File links and preview tokens as rows (sandboxes/services/access_links.py): they die for
good with the membership that made them, follow their creator's current role, can be revoked
one by one, carry nothing readable, and a viewer gets only short preview tokens (issue 24).

On the in-memory backend; a preview's port need not answer, authorize_preview only decides.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import re
import zlib
from datetime import timedelta

import pytest
from django.core.cache import cache
from django.utils import timezone

from sandboxes import services
from sandboxes.contract.errors import InvalidInput, NotFound, PermissionDenied
from sandboxes.contract.results import UploadFile
from sandboxes.models import AccessLink
from tenants import services as team_services
from tenants.models import AuditLog, Channel, Membership, Role
from tenants.principal import Principal
from tests.previews.helpers import ask

pytestmark = pytest.mark.django_db

CONTENT = b"the report\n"
WEEK = 7 * 24 * 3600


@pytest.fixture(autouse=True)
def no_remembered_audits() -> None:
    cache.clear()  # "preview.opened" is written once per token: no earlier test's


@pytest.fixture
def sandbox(fake_backend, as_alice) -> str:
    info = services.create_sandbox(as_alice, name="links")
    services.upload_files(as_alice, info.id, [UploadFile(path="report.txt", content=CONTENT)])
    services.get_preview_url(as_alice, info.id, 8000)  # an open preview on port 8000
    return info.id


@pytest.fixture
def as_mallory(mallory, team_a) -> Principal:
    return Principal(user=mallory, team=team_a, channel=Channel.API)


def anonymous() -> Principal:
    return Principal(user=None, team=None, channel=Channel.WEB, source_address="10.0.0.7")


def downloads(token: str) -> bool:
    """Whether the file link downloads its file, to someone with nothing but the token."""
    try:
        linked = services.open_file_link(anonymous(), token)
    except NotFound:
        return False
    try:
        return b"".join(linked.stream) == CONTENT
    finally:
        linked.stream.close()


def opens(sandbox: str, token: str) -> bool:
    """Whether the preview token opens port 8000's preview, with no session."""
    try:
        return services.authorize_preview(ask(sandbox, token=token)).via == "token"
    except NotFound:
        return False


def file_token(principal: Principal, sandbox: str) -> str:
    return services.create_file_link(principal, sandbox, "report.txt").token


def preview_token(principal: Principal, sandbox: str, seconds: int = 3600) -> str:
    return services.get_preview_url(principal, sandbox, 8000, expires_seconds=seconds).token


def membership(user) -> Membership:
    return Membership.objects.get(user=user)


# --- the findings ----------------------------------------------------------------------------


def test_a_removed_member_added_back_does_not_get_his_old_links_back(
    sandbox, as_alice, as_mallory, mallory, team_a
):
    old_file, old_preview = file_token(as_mallory, sandbox), preview_token(as_mallory, sandbox)
    assert downloads(old_file) and opens(sandbox, old_preview)
    team_services.remove_member(as_alice, membership(mallory))
    assert not downloads(old_file) and not opens(sandbox, old_preview)
    team_services.add_member(as_alice, team_a, mallory, Role.MEMBER)
    assert not downloads(old_file), "a re-added member's old file link works again"
    assert not opens(sandbox, old_preview), "a re-added member's old preview token works again"
    # He makes new ones, which work.
    assert downloads(file_token(as_mallory, sandbox))
    assert opens(sandbox, preview_token(as_mallory, sandbox))


def test_a_member_demoted_to_viewer_loses_his_file_links_and_long_preview_tokens(
    sandbox, as_alice, as_mallory, mallory
):
    link, token = file_token(as_mallory, sandbox), preview_token(as_mallory, sandbox, WEEK)
    assert downloads(link) and opens(sandbox, token)
    team_services.change_role(as_alice, membership(mallory), Role.VIEWER)
    assert not downloads(link), "a viewer's file link works (a viewer may not make one)"
    assert not opens(sandbox, token), "a viewer's week-long preview token works"
    # They follow his current role: made a member again, they work again.
    team_services.change_role(as_alice, membership(mallory), Role.MEMBER)
    assert downloads(link) and opens(sandbox, token)


def test_a_viewer_gets_short_preview_tokens_only(sandbox, as_victor):
    with pytest.raises(PermissionDenied, match="at most 600 s"):
        services.get_preview_url(as_victor, sandbox, 8000, expires_seconds=WEEK)
    with pytest.raises(PermissionDenied, match="at most 600 s"):
        services.get_preview_url(as_victor, sandbox, 8000, expires_seconds=601)
    short = services.get_preview_url(as_victor, sandbox, 8000, expires_seconds=600)
    assert opens(sandbox, short.token)
    # Asked for no lifetime, a viewer gets the most he may have.
    default = services.get_preview_url(as_victor, sandbox, 8000)
    left = (default.expires_at - timezone.now()).total_seconds()
    assert 590 < left <= 600 and opens(sandbox, default.token)


def test_a_read_only_key_gets_short_preview_tokens_like_a_viewer(sandbox, alice, team_a):
    read_only = Principal(user=alice, team=team_a, channel=Channel.API, scopes=frozenset({"read"}))
    with pytest.raises(PermissionDenied, match="read-only API key may get preview links"):
        services.get_preview_url(read_only, sandbox, 8000, expires_seconds=3600)
    short = services.get_preview_url(read_only, sandbox, 8000, expires_seconds=300)
    assert AccessLink.objects.get(public_id=short.link_id).min_role == Role.VIEWER


def test_a_viewers_short_token_needs_only_read_and_a_members_needs_write(
    sandbox, as_alice, as_victor, as_mallory, victor, mallory
):
    viewers = services.get_preview_url(as_victor, sandbox, 8000, expires_seconds=300).token
    members = services.get_preview_url(as_mallory, sandbox, 8000, expires_seconds=300).token
    team_services.change_role(as_alice, membership(mallory), Role.VIEWER)
    assert opens(sandbox, viewers) and not opens(sandbox, members)


def readable_parts(token: str) -> list[bytes]:
    """The token and what its parts decode to: base64 of each part (split where signing
    puts its separators), and that decompressed when it is zlib."""
    found = [token.encode()]
    for part in re.split(r"[:.]", token):
        for alphabet in (base64.urlsafe_b64decode, base64.b64decode):
            try:
                raw = alphabet(part + "=" * (-len(part) % 4))
            except (binascii.Error, ValueError):
                continue
            found.append(raw)
            with contextlib.suppress(zlib.error):
                found.append(zlib.decompress(raw))
    return found


def test_a_token_says_nothing_of_who_made_it_or_what_it_opens(sandbox, as_alice, alice):
    for token in (file_token(as_alice, sandbox), preview_token(as_alice, sandbox)):
        for decoded in readable_parts(token):
            for secret in (sandbox.encode(), b'"u":', b'"s":', alice.username.encode()):
                assert secret not in decoded, (token, decoded)
            assert f'"u":{alice.pk}'.encode() not in decoded
        assert re.fullmatch(r"sh[lp]_[A-Za-z0-9_-]{43}", token), token  # random, nothing else


def test_only_the_tokens_hash_is_stored(sandbox, as_alice):
    made = services.create_file_link(as_alice, sandbox, "report.txt")
    row = AccessLink.objects.get(public_id=made.link_id)
    assert row.secret_hash == hashlib.sha256(made.token.encode()).hexdigest()
    columns = [str(getattr(row, f.attname)) for f in AccessLink._meta.concrete_fields]
    assert not any(made.token in value or made.token[4:] in value for value in columns)


# --- revoking, listing -----------------------------------------------------------------------


def test_one_link_revoked_while_another_of_the_sandbox_keeps_working(sandbox, as_alice, alice):
    keep, cut = [services.create_file_link(as_alice, sandbox, "report.txt") for _ in "ab"]
    keep_p, cut_p = [services.get_preview_url(as_alice, sandbox, 8000) for _ in "ab"]
    for made in (cut, cut_p):
        revoked = services.revoke_link(as_alice, sandbox, made.link_id)
        assert revoked.revoked_at is not None and revoked.revoked_by == "alice"
    assert not downloads(cut.token) and not opens(sandbox, cut_p.token)
    assert downloads(keep.token) and opens(sandbox, keep_p.token)
    listed = {link.id for link in services.list_links(as_alice, sandbox)}
    assert {keep.link_id, keep_p.link_id} <= listed and not {cut.link_id, cut_p.link_id} & listed
    row = AuditLog.objects.filter(action="link.revoke").latest("id")
    assert (row.actor, row.target_id, row.details["link_id"]) == (alice, sandbox, cut_p.link_id)
    # Revoking again changes nothing and says when it was revoked.
    again = services.revoke_link(as_alice, sandbox, cut.link_id)
    assert again.revoked_at == AccessLink.objects.get(public_id=cut.link_id).revoked_at


def test_who_may_revoke(sandbox, as_alice, as_mallory, as_victor, as_bob, alice, team_a):
    owners = services.create_file_link(as_alice, sandbox, "report.txt").link_id
    mine = services.create_file_link(as_mallory, sandbox, "report.txt").link_id
    victors = services.get_preview_url(as_victor, sandbox, 8000, expires_seconds=60).link_id
    with pytest.raises(PermissionDenied, match="creator or the team's owners and admins"):
        services.revoke_link(as_mallory, sandbox, owners)
    with pytest.raises(PermissionDenied, match="a viewer may not revoke links"):
        services.revoke_link(as_victor, sandbox, victors)
    read_only = Principal(user=alice, team=team_a, channel=Channel.API, scopes=frozenset({"read"}))
    with pytest.raises(PermissionDenied, match="no write scope"):
        services.revoke_link(read_only, sandbox, owners)
    with pytest.raises(NotFound, match=f"sandbox {sandbox} not found"):
        services.revoke_link(as_bob, sandbox, owners)
    assert services.revoke_link(as_mallory, sandbox, mine).revoked_by == "mallory"
    assert services.revoke_link(as_alice, sandbox, victors).revoked_by == "alice"
    assert not AccessLink.objects.filter(public_id=owners, revoked_at__isnull=False).exists()


def test_a_link_is_found_only_under_its_own_sandbox(sandbox, as_alice, as_bob, fake_backend):
    other = services.create_sandbox(as_alice, name="other").id
    link = services.create_file_link(as_alice, sandbox, "report.txt").link_id
    with pytest.raises(NotFound, match=f"link {link} not found in sandbox {other}"):
        services.revoke_link(as_alice, other, link)
    theirs = services.create_sandbox(as_bob).id
    with pytest.raises(NotFound, match=f"sandbox {theirs} not found"):
        services.list_links(as_alice, theirs)
    for bad in ["", "lnk_", "x" * 100, 7, None, "lnk_ABCDEFGHIJKL"]:
        with pytest.raises(InvalidInput, match="link ids look like lnk_"):
            services.revoke_link(as_alice, sandbox, bad)
    assert not AccessLink.objects.filter(revoked_at__isnull=False).exists()


def test_the_list_shows_the_links_that_work(sandbox, as_alice, as_mallory, as_victor, mallory):
    mine = services.create_file_link(as_alice, sandbox, "report.txt")
    token = services.get_preview_url(as_alice, sandbox, 8000, expires_seconds=900)
    dead = services.create_file_link(as_mallory, sandbox, "report.txt")
    team_services.change_role(as_alice, membership(mallory), Role.VIEWER)
    expired = services.create_file_link(as_alice, sandbox, "report.txt")
    AccessLink.objects.filter(public_id=expired.link_id).update(expires_at=timezone.now())
    listed = {link.id: link for link in services.list_links(as_victor, sandbox)}  # a viewer may
    assert {mine.link_id, token.link_id} <= set(listed)
    assert not {dead.link_id, expired.link_id} & set(listed)
    file_link, preview = listed[mine.link_id], listed[token.link_id]
    assert (file_link.kind, file_link.path, file_link.port) == (
        "file",
        "/workspace/report.txt",
        None,
    )
    assert (preview.kind, preview.path, preview.port) == ("preview", None, 8000)
    assert file_link.created_by == "alice" and file_link.last_used_at is None
    assert preview.expires_at == token.expires_at and preview.min_role == "member"
    assert downloads(mine.token)
    used = services.list_links(as_alice, sandbox)
    assert next(link for link in used if link.id == mine.link_id).last_used_at is not None


def test_stopping_a_preview_or_deleting_the_sandbox_ends_its_links(sandbox, as_alice):
    link, token = file_token(as_alice, sandbox), preview_token(as_alice, sandbox)
    services.stop_app(as_alice, sandbox, 8000)
    assert not opens(sandbox, token)
    services.get_preview_url(as_alice, sandbox, 8000)  # the port opened again: a new preview
    assert not opens(sandbox, token)
    assert [link.kind for link in services.list_links(as_alice, sandbox)] == ["preview", "file"]
    services.delete_sandbox(as_alice, sandbox)
    assert not downloads(link)


def test_every_use_names_the_link_in_the_audit(sandbox, as_alice, team_a):
    made = services.create_file_link(as_alice, sandbox, "report.txt")
    token = services.get_preview_url(as_alice, sandbox, 8000)
    assert downloads(made.token) and opens(sandbox, token.token)
    opened = AuditLog.objects.get(action="files.link.open")
    assert opened.details["link_id"] == made.link_id and opened.team == team_a
    viewed = AuditLog.objects.get(action="preview.opened")
    assert viewed.details["link_id"] == token.link_id
    assert viewed.details["created_by"] == "alice"
    refused = services.open_file_link
    with pytest.raises(NotFound, match="invalid or has expired"):
        refused(anonymous(), "shl_" + "A" * 43)


# --- the sweep -------------------------------------------------------------------------------


def test_the_sweep_deletes_links_long_expired_or_revoked(sandbox, as_alice):
    from sandboxes.housekeeping.sweep import LINK_RETENTION

    now = timezone.now()
    made = {name: file_token(as_alice, sandbox) for name in ("fresh", "old", "cut", "cut_now")}
    rows = {name: AccessLink.objects.get(secret_hash=_hash(token)) for name, token in made.items()}
    long_ago = now - LINK_RETENTION - timedelta(minutes=1)
    AccessLink.objects.filter(pk=rows["old"].pk).update(expires_at=long_ago)
    AccessLink.objects.filter(pk=rows["cut"].pk).update(revoked_at=long_ago)
    AccessLink.objects.filter(pk=rows["cut_now"].pk).update(revoked_at=now)
    report = services.sweep_expired_and_idle(Principal.system())
    assert report.links_deleted == 2
    left = set(AccessLink.objects.values_list("pk", flat=True))
    assert left >= {rows["fresh"].pk, rows["cut_now"].pk}
    assert not left & {rows["old"].pk, rows["cut"].pk}


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()
