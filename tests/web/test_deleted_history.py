"""A deleted sandbox's history on the pages: every member of its team (viewers too) reads it
from "Deleted sandboxes", read only; the history page points each role where it may go (the
Team page's command history only for owners and admins, who alone may open it)."""

from __future__ import annotations

import pytest

from sandboxes import services

pytestmark = pytest.mark.django_db


@pytest.fixture
def gone(sandbox, as_alice) -> tuple[str, int]:
    """Alice's sandbox after `echo kept` and a background job ran in it, deleted."""
    command = services.run_command(as_alice, sandbox, "echo kept")
    services.start_background(as_alice, sandbox, "echo in the background")
    services.delete_sandbox(as_alice, sandbox)
    return sandbox, command.id


@pytest.mark.parametrize("who", ["mallory", "victor", "alice"])
def test_the_team_reads_a_deleted_sandboxs_history(login, gone, who, request):
    sandbox, command_id = gone
    client = login(request.getfixturevalue(who))
    listed = client.get("/sandboxes/deleted/")
    assert listed.status_code == 200
    assert f'href="/sandboxes/{sandbox}/commands/"' in listed.content.decode()
    history = client.get(f"/sandboxes/{sandbox}/commands/")
    assert history.status_code == 200
    page = history.content.decode()
    assert 'id="history-deleted"' in page and "echo kept" in page
    assert f"/sandboxes/{sandbox}/jobs/" not in page  # a deleted sandbox's jobs answer nothing
    output = client.get(f"/sandboxes/{sandbox}/commands/{command_id}/")
    assert output.status_code == 200 and "kept\n" in output.content.decode()


def test_the_history_page_points_each_role_where_it_may_go(
    login, sandbox, as_alice, alice, mallory
):
    services.run_command(as_alice, sandbox, "echo hi")
    member = login(mallory).get(f"/sandboxes/{sandbox}/commands/").content.decode()
    note = member.split('id="history-older">', 1)[1].split("</p>", 1)[0]
    assert "/team/commands/" not in note and "/sandboxes/deleted/" in note
    assert login(mallory).get("/team/commands/").status_code == 403  # why it is not offered
    owner = login(alice).get(f"/sandboxes/{sandbox}/commands/").content.decode()
    assert 'href="/team/commands/"' in owner.split('id="history-older">', 1)[1]


def test_another_team_finds_no_deleted_sandbox(login, gone, bob):
    sandbox, command_id = gone
    client = login(bob)
    assert client.get(f"/sandboxes/{sandbox}/commands/").status_code == 404
    assert client.get(f"/sandboxes/{sandbox}/commands/{command_id}/").status_code == 404
    assert sandbox not in client.get("/sandboxes/deleted/").content.decode()
