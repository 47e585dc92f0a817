"""The sandbox page and everything on it, through the Django test client on the in-memory
backend: auth required, 404 across teams, a viewer sees no write controls and is refused on
POST, CSRF enforced, bad input shown and nothing changed. The command runner's stream is
tested here too (its first chunk comes before the command ends); the real engine's stream,
downloads and archives are in test_sandbox_page_docker.py."""

from __future__ import annotations

import asyncio
import io
import json
import time
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import connections
from django.test import AsyncClient

from hosts.backends import reset_backends
from hosts.backends.base import ExecResult
from sandboxes import services
from sandboxes.contract.errors import QuotaExceeded
from sandboxes.models import CommandExecution, Sandbox
from tenants.models import AuditLog
from tenants.principal import Principal
from tests.fakes import FakeBackend
from tests.web.helpers import field_errors, files_of, read_stream

pytestmark = pytest.mark.django_db


# --- helpers ---------------------------------------------------------------------------------


def events(body: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in body.decode().splitlines() if line]


class SlowFake(FakeBackend):
    """The fake backend, plus a command `count` that prints 1, 2, 3 half a second apart."""

    def exec(
        self,
        state,
        argv,
        *,
        cwd,
        env,
        timeout,
        output_cap,
        on_output=None,
        stdin=None,
        once=False,
        marker=None,
    ):
        if argv[:2] != ["bash", "-c"] or argv[2] != "count":
            return super().exec(
                state,
                argv,
                cwd=cwd,
                env=env,
                timeout=timeout,
                output_cap=output_cap,
                on_output=on_output,
                stdin=stdin,
                once=once,
                marker=marker,
            )
        started = time.monotonic()
        for number in (1, 2, 3):
            if on_output:
                on_output("stdout", f"{number}\n".encode())
            time.sleep(0.5)
        return ExecResult(
            0, b"1\n2\n3\n", b"", 6, 0, False, False, False, time.monotonic() - started
        )


SID = "sb_abcdef123456"  # well-formed, and nobody's


def urls(sid: str, command_id: int = 1) -> tuple[list[str], list[str]]:
    base = f"/sandboxes/{sid}/"
    gets = [
        base,
        base + "commands/",
        base + f"commands/{command_id}/",
        base + "files/?path=/workspace",
        base + "files/view/?path=/workspace/a.txt",
        base + "files/download/?path=/workspace/a.txt",
        base + "files/archive/?path=/workspace",
        base + f"jobs/{command_id}/",
        base + f"jobs/{command_id}/tail/",
    ]
    posts = [
        base + "extend/",
        base + "run/",
        base + "files/save/",
        base + "files/new/",
        base + "files/upload/",
        base + "files/link/",
        base + "jobs/start/",
        base + f"jobs/{command_id}/cancel/",
    ]
    return gets, posts


# --- who may see what ------------------------------------------------------------------------


def test_anonymous_is_sent_to_login(client, sandbox):
    gets, posts = urls(sandbox)
    for url in gets:
        response = client.get(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith("/login/?next="), url
    for url in posts:
        assert client.post(url).status_code == 302, url


def test_another_teams_sandbox_is_not_found_on_every_url(login, sandbox, bob, as_alice):
    command_id = services.run_command(as_alice, sandbox, "echo mine").id
    client = login(bob)
    gets, posts = urls(sandbox, command_id)
    for url in gets:
        response = client.get(url, HTTP_HX_REQUEST="true")
        assert response.status_code == 404, url
        assert b"echo mine" not in response.content and b"hello" not in response.content
    for url in posts:
        data = {"command": "echo hacked", "minutes": "5", "path": "b.txt", "content": "x"}
        assert client.post(url, data).status_code == 404, url
    assert CommandExecution.objects.count() == 1
    assert "/workspace/b.txt" not in files_of(sandbox)


def test_owner_sees_everything(login, sandbox, alice):
    response = login(alice).get(f"/sandboxes/{sandbox}/")
    assert response.status_code == 200
    html = response.content.decode()
    for needle in [
        'id="run-form"',
        'name="command"',
        'id="run-submit"',
        'id="run-output"',
        'class="output"',
        'id="run-exit"',
        'id="upload-form"',
        'type="file" name="files"',
        "multiple",
        'class="file-row"',
        'class="download"',
        "copy-link",
        'id="extend-form"',
        'id="job-form"',
        'id="new-file-form"',
        "a.txt",
        "running",
        "python",  # image
        "local",  # host
        "alice",  # owner
        "Memory",
        "Network",
    ]:
        assert needle in html, needle


def test_viewer_sees_no_write_controls(login, sandbox, victor):
    html = login(victor).get(f"/sandboxes/{sandbox}/").content.decode()
    assert "a.txt" in html and 'id="read-only"' in html  # reads everything, says why no runner
    for control in [
        'id="run-form"',
        'id="upload-form"',
        "copy-link",
        'id="extend-form"',
        'id="job-form"',
        'id="new-file-form"',
    ]:
        assert control not in html, control
    view = login(victor).get(f"/sandboxes/{sandbox}/files/view/?path=a.txt").content.decode()
    assert "hello" in view and 'id="edit-form"' not in view


def test_viewer_is_refused_on_every_post(login, sandbox, victor, as_alice):
    job = services.start_background(as_alice, sandbox, "sleep 30")
    before_expiry = Sandbox.objects.get(public_id=sandbox).expires_at
    upload = io.BytesIO(b"upload")
    upload.name = "up.txt"
    client = login(victor)
    _, posts = urls(sandbox, job.id)
    data = {
        "command": "echo viewer",
        "job-command": "echo viewer",
        "minutes": "5",
        "path": "a.txt",
        "content": "changed",
        "files": io.BytesIO(b"upload"),
    }
    for url in posts:
        if "files" in data and hasattr(data["files"], "seek"):
            data["files"].seek(0)
        response = client.post(url, data)
        assert response.status_code == 403, url
        assert b"viewer may not" in response.content, url
    assert CommandExecution.objects.count() == 1  # only the job
    assert CommandExecution.objects.get().status == "running"  # not cancelled
    assert files_of(sandbox) == {"/workspace/a.txt": b"hello\n"}
    assert Sandbox.objects.get(public_id=sandbox).expires_at == before_expiry


def test_csrf_is_enforced_on_every_post(login, sandbox, alice):
    client = login(alice, csrf=True)
    before = AuditLog.objects.count()
    _, posts = urls(sandbox)
    for url in posts:
        response = client.post(url, {"command": "echo x", "minutes": "5", "path": "b.txt"})
        assert response.status_code == 403, url
    assert AuditLog.objects.count() == before  # no service was even called
    assert CommandExecution.objects.count() == 0


def test_malformed_sandbox_id_is_refused(login, alice, fake_backend):
    response = login(alice).get("/sandboxes/not-an-id/")
    assert response.status_code == 400
    assert b"malformed sandbox id" in response.content


def test_a_stopped_sandbox_shows_why_there_is_no_runner(login, sandbox, alice):
    Sandbox.objects.filter(public_id=sandbox).update(status="lost")
    html = login(alice).get(f"/sandboxes/{sandbox}/").content.decode()
    assert 'id="not-running"' in html and 'id="run-form"' not in html
    response = login(alice).post(f"/sandboxes/{sandbox}/run/", {"command": "echo hi"})
    assert response.status_code == 409 and b"lost" in response.content


# --- expiry ----------------------------------------------------------------------------------


def test_extend_pushes_the_expiry_back(login, sandbox, alice):
    before = Sandbox.objects.get(public_id=sandbox).expires_at
    response = login(alice).post(f"/sandboxes/{sandbox}/extend/", {"minutes": "30"})
    assert response.status_code == 302
    after = Sandbox.objects.get(public_id=sandbox).expires_at
    assert after - before == timedelta(minutes=30)
    row = AuditLog.objects.get(action="sandbox.extend")
    assert row.outcome == "ok" and row.details["minutes"] == 30 and row.target_id == sandbox


def test_extend_beyond_the_team_maximum_is_refused(login, sandbox, alice, team_a):
    before = Sandbox.objects.get(public_id=sandbox).expires_at
    too_many = str(team_a.max_lifetime_minutes)  # counted from creation: already 60 used
    response = login(alice).post(f"/sandboxes/{sandbox}/extend/", {"minutes": too_many})
    assert response.status_code == 400
    assert field_errors(response.content.decode(), "minutes")
    assert Sandbox.objects.get(public_id=sandbox).expires_at == before
    # The service refuses as well when the form's bound is passed by (another tab, a race).
    with pytest.raises(QuotaExceeded, match="at most"):
        services.extend_sandbox(Principal(alice, team_a), sandbox, team_a.max_lifetime_minutes)
    assert Sandbox.objects.get(public_id=sandbox).expires_at == before


@pytest.mark.parametrize("minutes", ["", "0", "-5", "ten"])
def test_extend_with_bad_input_changes_nothing(login, sandbox, alice, minutes):
    before = Sandbox.objects.get(public_id=sandbox).expires_at
    response = login(alice).post(f"/sandboxes/{sandbox}/extend/", {"minutes": minutes})
    assert response.status_code == 400
    assert field_errors(response.content.decode(), "minutes")
    assert Sandbox.objects.get(public_id=sandbox).expires_at == before
    assert not AuditLog.objects.filter(action="sandbox.extend").exists()


# --- the command runner ----------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)  # the command runs in a thread of its own
def test_run_streams_output_and_records_the_command_once(login, sandbox, alice):
    response = login(alice).post(
        f"/sandboxes/{sandbox}/run/",
        {"command": "echo hello there"},
        HTTP_X_SANDHUB_STREAM="ndjson",
    )
    assert response.status_code == 200 and response["Content-Type"] == "application/x-ndjson"
    got = events(read_stream(response))
    assert {"t": "out", "s": "stdout", "d": "hello there\n"} in got
    end = got[-1]
    assert end["t"] == "end" and end["exit_code"] == 0 and end["status"] == "succeeded"
    assert end["truncated"] is False and end["duration"] is not None
    assert end["url"] == f"/sandboxes/{sandbox}/commands/{end['id']}/"
    execution = CommandExecution.objects.get(command="echo hello there")
    assert execution.channel == "web" and execution.actor.username == "alice"
    assert AuditLog.objects.filter(action="command.run", outcome="ok").count() == 1


@pytest.mark.django_db(transaction=True)
def test_run_without_the_script_streams_a_plain_page(login, sandbox, alice):
    response = login(alice).post(f"/sandboxes/{sandbox}/run/", {"command": "exit 3"})
    assert response.status_code == 200 and response["Content-Type"].startswith("text/html")
    page = read_stream(response).decode()
    assert 'id="run-output"' in page and '<span id="run-exit">3</span>' in page


@pytest.mark.django_db(transaction=True)
def test_the_first_chunk_comes_before_the_command_ends(login, sandbox, alice, settings):
    settings.SANDHUB_BACKENDS = {"docker": "tests.web.test_sandbox_page.SlowFake"}
    reset_backends()
    cookies = login(alice).cookies

    async def conversation() -> tuple[list[tuple[float, bytes]], float]:
        client = AsyncClient()
        client.cookies = cookies
        started = time.monotonic()
        response = await client.post(
            f"/sandboxes/{sandbox}/run/",
            {"command": "count"},
            headers={"X-Sandhub-Stream": "ndjson"},
        )
        assert response.status_code == 200
        chunks = [(time.monotonic() - started, chunk) async for chunk in response.streaming_content]
        elapsed = time.monotonic() - started
        # The view ran in asgiref's thread for sync code, whose connection no request end
        # closes under the test client: left open, PostgreSQL could not drop the test database.
        await sync_to_async(connections.close_all)()
        return chunks, elapsed

    chunks, total = asyncio.run(conversation())
    first_at, first = chunks[0]
    assert json.loads(first) == {"t": "out", "s": "stdout", "d": "1\n"}
    assert total >= 1.4  # the command took its 1.5 s ...
    assert first_at < total - 0.8  # ... and its first line came long before its end
    assert events(b"".join(c for _, c in chunks))[-1]["exit_code"] == 0
    reset_backends()


@pytest.mark.parametrize(
    "data", [{}, {"command": ""}, {"command": "   "}, {"command": "x", "timeout": "0"}]
)
def test_run_with_bad_input_runs_nothing(login, sandbox, alice, data):
    response = login(alice).post(f"/sandboxes/{sandbox}/run/", data)
    assert response.status_code == 400
    assert response.content  # says what is wrong
    assert CommandExecution.objects.count() == 0


@pytest.mark.django_db(transaction=True)
def test_run_reports_what_the_service_refuses(login, sandbox, alice, settings):
    response = login(alice).post(
        f"/sandboxes/{sandbox}/run/",
        {"command": "echo x", "timeout": str(settings.SANDHUB_MAX_TIMEOUT_SECONDS + 1)},
    )
    assert response.status_code == 400 and b"At most" in response.content
    assert CommandExecution.objects.count() == 0


# --- history ---------------------------------------------------------------------------------


def test_history_filters_by_status_and_opens_full_output(login, sandbox, alice, as_alice):
    ok = services.run_command(as_alice, sandbox, "echo good")
    bad = services.run_command(as_alice, sandbox, "exit 2")
    client = login(alice)
    everything = client.get(f"/sandboxes/{sandbox}/commands/").content.decode()
    assert "echo good" in everything and "exit 2" in everything
    failed = client.get(f"/sandboxes/{sandbox}/commands/?status=failed").content.decode()
    assert "exit 2" in failed and "echo good" not in failed
    detail = client.get(f"/sandboxes/{sandbox}/commands/{ok.id}/")
    assert detail.status_code == 200
    assert 'id="command-stdout">good\n</pre>' in detail.content.decode()
    assert client.get(f"/sandboxes/{sandbox}/commands/{bad.id}/").status_code == 200
    bogus = client.get(f"/sandboxes/{sandbox}/commands/?status=bogus")
    assert bogus.status_code == 400 and field_errors(bogus.content.decode(), "status")


def test_a_command_of_another_sandbox_is_not_under_this_one(login, sandbox, alice, as_alice):
    other = services.create_sandbox(as_alice).id
    command_id = services.run_command(as_alice, other, "echo elsewhere").id
    response = login(alice).get(f"/sandboxes/{sandbox}/commands/{command_id}/")
    assert response.status_code == 404 and b"elsewhere" not in response.content


def test_recent_commands_are_on_the_page(login, sandbox, alice, as_alice):
    services.run_command(as_alice, sandbox, "echo recent-one")
    html = login(alice).get(f"/sandboxes/{sandbox}/").content.decode()
    assert "echo recent-one" in html


@pytest.mark.django_db(transaction=True)
def test_the_plain_page_draws_colours_and_escapes_the_rest(login, sandbox, alice):
    """Without the page's script the streamed page renders SGR colours as the live view does
    (classes from ansi.css) and still escapes what the command printed."""
    command = "echo \x1b[31mred\x1b[0m <b>bold</b>"
    response = login(alice).post(f"/sandboxes/{sandbox}/run/", {"command": command})
    page = read_stream(response).decode()
    assert '<span class="ansi-fg-1">red</span>' in page
    assert "\x1b" not in page and "[31m" not in page
    assert "&lt;b&gt;bold&lt;/b&gt;" in page and "<b>bold" not in page
    assert "/static/web/ansi.css" in page
