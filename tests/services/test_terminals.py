"""Terminal and shell-session services on the in-memory backend (tests/fake_terminals.py):
who may open, attach and close a terminal; another team's terminal answers as a missing one;
the per-sandbox cap; opening and closing on the audit log, what is typed never; rows closed
when the holder or the sandbox ends; run_command's session and stdin."""

from __future__ import annotations

import pytest

from sandboxes import services
from sandboxes.contract.errors import Conflict, InvalidInput, NotFound, PermissionDenied
from sandboxes.models import CommandExecution, Terminal
from sandboxes.services import terminals
from tenants.models import AuditLog, Channel
from tenants.principal import Principal

pytestmark = pytest.mark.django_db
GHOST_TERMINAL = "tm-00000000000000000000000000000"


@pytest.fixture
def sandbox(fake_backend, as_alice):
    return services.create_sandbox(as_alice, name="shell").id


@pytest.fixture
def as_mallory(mallory, team_a) -> Principal:
    return Principal(user=mallory, team=team_a, channel=Channel.WEB)


def read_until(stream, wanted: bytes) -> bytes:
    seen = b""
    while wanted not in seen:
        chunk = stream.read(timeout=5)
        assert chunk, f"the terminal ended before {wanted!r}: {seen!r}"
        seen += chunk
    return seen


def test_a_member_opens_types_and_closes_a_terminal_audited_without_keystrokes(sandbox, as_mallory):
    opened = services.open_terminal(as_mallory, sandbox, cols=100, rows=30)
    assert opened.id.startswith("tm-") and len(opened.id) == 32 and opened.open
    assert (opened.kind, opened.opened_by, opened.channel) == ("terminal", "mallory", "web")
    with services.attach_terminal(as_mallory, sandbox, opened.id) as stream:
        stream.write(b"echo top-secret-keystrokes\r")
        read_until(stream, b"top-secret-keystrokes")
    assert [t.id for t in services.list_terminals(as_mallory, sandbox)] == [opened.id]

    closed = services.close_terminal(as_mallory, sandbox, opened.id)
    assert closed.closed_at is not None and closed.close_reason == "closed by mallory"
    assert services.list_terminals(as_mallory, sandbox) == []
    actions = list(AuditLog.objects.order_by("id").values_list("action", "outcome", "target_id"))
    assert ("terminal.open", "ok", sandbox) in actions
    assert ("terminal.attach", "ok", opened.id) in actions
    assert ("terminal.close", "ok", opened.id) in actions
    assert not any("keystrokes" in str(row.details) for row in AuditLog.objects.all())


def test_the_scrollback_is_replayed_to_the_next_attach(sandbox, as_alice):
    opened = services.open_terminal(as_alice, sandbox)
    with services.attach_terminal(as_alice, sandbox, opened.id) as stream:
        stream.write(b"first\r")
        read_until(stream, b"first")
    with services.attach_terminal(as_alice, sandbox, opened.id) as again:
        assert b"first" in read_until(again, b"first")


def test_a_viewer_may_not_open_or_attach(sandbox, as_alice, as_victor):
    with pytest.raises(PermissionDenied, match="a viewer may not open terminals"):
        services.open_terminal(as_victor, sandbox)
    opened = services.open_terminal(as_alice, sandbox)
    with pytest.raises(PermissionDenied, match="a viewer may not"):
        services.attach_terminal(as_victor, sandbox, opened.id)
    with pytest.raises(PermissionDenied):
        services.close_terminal(as_victor, sandbox, opened.id)
    assert [t.id for t in services.list_terminals(as_victor, sandbox)] == [opened.id]
    assert Terminal.objects.count() == 1
    refusal = AuditLog.objects.filter(action="terminal.open", outcome="forbidden")
    assert refusal.exists()


def test_a_read_only_key_may_not_open(sandbox, alice, team_a):
    read_only = Principal(user=alice, team=team_a, channel=Channel.API, scopes=frozenset({"read"}))
    with pytest.raises(PermissionDenied, match="no write scope"):
        services.open_terminal(read_only, sandbox)


def test_another_teams_terminal_answers_as_a_missing_one(sandbox, as_alice, as_bob):
    opened = services.open_terminal(as_alice, sandbox)
    bobs = services.create_sandbox(as_bob).id
    for call in (services.attach_terminal, services.close_terminal):
        with pytest.raises(NotFound) as foreign:
            call(as_bob, sandbox, opened.id)
        with pytest.raises(NotFound) as ghost:
            call(as_bob, sandbox, GHOST_TERMINAL)
        assert str(foreign.value).replace(opened.id, "X") == str(ghost.value).replace(
            GHOST_TERMINAL, "X"
        ).replace(GHOST_TERMINAL, "X")
        # His own sandbox's id with her terminal's id: still not found.
        with pytest.raises(NotFound, match="terminal .* not found"):
            call(as_bob, bobs, opened.id)
    with pytest.raises(NotFound):
        services.list_terminals(as_bob, sandbox)
    assert Terminal.objects.get().closed_at is None


def test_the_cap_on_open_terminals_and_a_closed_one_frees_a_place(sandbox, as_alice, settings):
    settings.SANDHUB_MAX_TERMINALS_PER_SANDBOX = 2
    first = services.open_terminal(as_alice, sandbox)
    services.open_terminal(as_alice, sandbox)
    with pytest.raises(Conflict, match="2 open terminals, the most it may have"):
        services.open_terminal(as_alice, sandbox)
    services.close_terminal(as_alice, sandbox, first.id)
    services.open_terminal(as_alice, sandbox)
    assert Terminal.objects.open().count() == 2


def test_a_terminal_that_ended_on_its_own_is_listed_closed_and_refused(
    sandbox, as_alice, fake_backend
):
    opened = services.open_terminal(as_alice, sandbox)
    state = next(iter(fake_backend.sandboxes))
    fake_backend.sandboxes[state]["terminals"].pop(opened.id).end()  # its shell exited
    assert services.list_terminals(as_alice, sandbox) == []
    assert Terminal.objects.get().close_reason == "it ended"
    with pytest.raises(Conflict, match="has ended"):
        services.attach_terminal(as_alice, sandbox, opened.id)


def test_deleting_the_sandbox_closes_its_rows(sandbox, as_alice):
    services.open_terminal(as_alice, sandbox)
    services.run_command(as_alice, sandbox, "true", session="main")
    services.delete_sandbox(as_alice, sandbox)
    assert terminals.close_stale_terminals() == 2
    assert not Terminal.objects.open().exists()


def test_a_bad_window_size_is_refused_and_opens_nothing(sandbox, as_alice):
    for cols, rows in ((0, 24), (80, 0), ("80", 24), (True, 24), (80, 10_000)):
        with pytest.raises(InvalidInput, match="cols|rows"):
            services.open_terminal(as_alice, sandbox, cols=cols, rows=rows)
    assert not Terminal.objects.exists()


# --- shell sessions and stdin -----------------------------------------------------------------


def test_a_session_keeps_cwd_and_variables_and_no_session_stays_stateless(sandbox, as_alice):
    services.run_command(as_alice, sandbox, "cd /tmp; export X=5", session="main")
    result = services.run_command(as_alice, sandbox, "echo $X; pwd", session="main")
    assert result.stdout == "5\n/tmp\n"
    other = services.run_command(as_alice, sandbox, "pwd", session="other")
    assert other.stdout == "/workspace\n"
    row = CommandExecution.objects.get(pk=result.id)
    assert row.session == "main" and row.command == "echo $X; pwd"
    names = [s.name for s in services.list_sessions(as_alice, sandbox)]
    assert names == ["main", "other"]
    assert AuditLog.objects.filter(action="command.run", details__session="main").count() == 2

    services.close_session(as_alice, sandbox, "main")
    assert [s.name for s in services.list_sessions(as_alice, sandbox)] == ["other"]
    fresh = services.run_command(as_alice, sandbox, "pwd", session="main")
    assert fresh.stdout == "/workspace\n"


def test_bad_session_names_and_foreign_sessions(sandbox, as_alice, as_bob, as_victor):
    for name in ("", "Main", "a b", "-x", "x" * 41, 5):
        with pytest.raises(InvalidInput, match="session name"):
            services.run_command(as_alice, sandbox, "pwd", session=name)
    services.run_command(as_alice, sandbox, "pwd", session="main")
    with pytest.raises(NotFound):
        services.close_session(as_bob, sandbox, "main")
    with pytest.raises(NotFound):
        services.list_sessions(as_bob, sandbox)
    with pytest.raises(PermissionDenied, match="a viewer may not"):
        services.close_session(as_victor, sandbox, "main")
    with pytest.raises(NotFound, match="shell session nope not found"):
        services.close_session(as_alice, sandbox, "nope")


def test_stdin_reaches_the_command_and_too_much_is_refused(sandbox, as_alice):
    assert services.run_command(as_alice, sandbox, "cat", stdin="hello\n").stdout == "hello\n"
    too_much = "x" * (services.MAX_STDIN_BYTES + 1)
    with pytest.raises(InvalidInput, match="1048576 bytes"):
        services.run_command(as_alice, sandbox, "cat", stdin=too_much)
    with pytest.raises(InvalidInput, match="stdin must be text"):
        services.run_command(as_alice, sandbox, "cat", stdin=b"bytes")  # type: ignore[arg-type]
