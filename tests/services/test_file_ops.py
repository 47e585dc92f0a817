"""Delete, rename and new folder on the in-memory backend (sandboxes/services/file_ops.py):
what they do, one audit row each, and every refusal: viewers, read-only keys, another team,
paths outside /workspace or through a link, a missing source, an existing destination, a
file where a folder is needed."""

from __future__ import annotations

import pytest

from sandboxes import services
from sandboxes.contract.errors import Conflict, InvalidInput, NotFound, PermissionDenied
from tenants.models import AuditLog, Channel
from tests.web.helpers import files_of

pytestmark = pytest.mark.django_db


@pytest.fixture
def sandbox(fake_backend, as_alice) -> str:
    info = services.create_sandbox(as_alice)
    services.write_file(as_alice, info.id, "src/a.txt", "hello\n")
    return info.id


def test_mkdir_rename_and_delete(as_alice, sandbox) -> None:
    made = services.make_directory(as_alice, sandbox, "docs/drafts")
    assert (made.action, made.path) == ("mkdir", "/workspace/docs/drafts")
    moved = services.rename_path(as_alice, sandbox, "/workspace/src", "docs/drafts/src")
    assert moved.to == "/workspace/docs/drafts/src"
    assert files_of(sandbox) == {"/workspace/docs/drafts/src/a.txt": b"hello\n"}
    gone = services.delete_path(as_alice, sandbox, "docs")
    assert gone.action == "delete" and files_of(sandbox) == {}
    rows = AuditLog.objects.filter(target_id=sandbox, action__in=FILE_ACTIONS)
    assert sorted(r.action for r in rows) == sorted(FILE_ACTIONS)
    assert all(r.outcome == "ok" for r in rows)
    rename = rows.get(action="files.rename")
    assert rename.details["to"] == "/workspace/docs/drafts/src"


FILE_ACTIONS = ["files.mkdir", "files.rename", "files.delete"]


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda p, s: services.delete_path(p, s, "missing.txt"), NotFound, "not found"),
        (lambda p, s: services.rename_path(p, s, "missing", "b"), NotFound, "not found"),
        (lambda p, s: services.rename_path(p, s, "src", "src/a.txt"), InvalidInput, "into itself"),
        (lambda p, s: services.rename_path(p, s, "src/a.txt", "src"), Conflict, "already exists"),
        (lambda p, s: services.make_directory(p, s, "src"), Conflict, "already exists"),
        (lambda p, s: services.make_directory(p, s, "src/a.txt/x"), InvalidInput, "not a folder"),
        (lambda p, s: services.delete_path(p, s, "/workspace"), InvalidInput, "not the folder"),
        (lambda p, s: services.delete_path(p, s, "."), InvalidInput, "not the folder"),
        (lambda p, s: services.delete_path(p, s, "/etc/passwd"), InvalidInput, "inside"),
        (lambda p, s: services.delete_path(p, s, "a/../../etc"), InvalidInput, "'..'"),
        (lambda p, s: services.rename_path(p, s, "src", "/tmp/x"), InvalidInput, "inside"),
        (lambda p, s: services.make_directory(p, s, ""), InvalidInput, "non-empty"),
        (lambda p, s: services.make_directory(p, s, "link/x"), InvalidInput, "symbolic link"),
    ],
)
def test_refusals_change_nothing(as_alice, sandbox, fake_backend, call, error, message) -> None:
    box = next(iter(fake_backend.sandboxes.values()))
    box["links"] = {"/workspace/link": "/etc"}
    services.write_file(as_alice, sandbox, "src/b.txt", "b")
    services.rename_path(as_alice, sandbox, "src/b.txt", "src/c.txt")  # a rename that works
    before = files_of(sandbox)
    with pytest.raises(error, match=message):
        call(as_alice, sandbox)
    assert files_of(sandbox) == before


def test_an_existing_destination_is_refused_not_replaced(as_alice, sandbox) -> None:
    services.write_file(as_alice, sandbox, "b.txt", "other")
    with pytest.raises(Conflict, match="already exists"):
        services.rename_path(as_alice, sandbox, "src/a.txt", "b.txt")
    assert files_of(sandbox)["/workspace/b.txt"] == b"other"


def test_viewers_read_only_keys_and_other_teams_are_refused(
    as_alice, as_victor, as_bob, sandbox
) -> None:
    read_only = as_alice.__class__(
        user=as_alice.user, team=as_alice.team, channel=Channel.API, scopes=frozenset({"read"})
    )
    for principal, error in ((as_victor, PermissionDenied), (read_only, PermissionDenied)):
        with pytest.raises(error):
            services.delete_path(principal, sandbox, "src")
        with pytest.raises(error):
            services.make_directory(principal, sandbox, "x")
        with pytest.raises(error):
            services.rename_path(principal, sandbox, "src", "y")
    with pytest.raises(NotFound, match="sandbox"):
        services.delete_path(as_bob, sandbox, "src")
    with pytest.raises(NotFound, match="sandbox"):
        services.rename_path(as_bob, sandbox, "src", "y")
    assert files_of(sandbox) == {"/workspace/src/a.txt": b"hello\n"}
