"""Pause, resume and stop on the pages, through the Django test client on the in-memory
backend: the buttons (POST forms, Stop asking first with data-confirm) on the sandbox page
and the home list, status badges, what happened as a message, refusals (a viewer, another
team, a command running), opening a paused sandbox's page waking nothing, and the runner
resuming it and saying so. In a real browser: test_browser_lifecycle.py."""

from __future__ import annotations

import json
import re

import pytest

from sandboxes import services
from sandboxes.models import CommandExecution, Sandbox
from tenants.models import Channel
from tests.web.helpers import read_stream

pytestmark = pytest.mark.django_db


def status_of(sandbox_id: str) -> str:
    return Sandbox.objects.get(public_id=sandbox_id).status


def messages_on(html: str) -> str:
    return " ".join(re.findall(r'class="message[^"]*"[^>]*>(.*?)<', html, re.S))


def test_the_page_pauses_stops_and_resumes_with_buttons(login, sandbox, alice):
    client = login(alice)
    page = client.get(f"/sandboxes/{sandbox}/").content.decode()
    assert f'action="/sandboxes/{sandbox}/pause/"' in page
    stop_form = re.search(rf'<form[^>]*action="/sandboxes/{sandbox}/stop/"[^>]*>', page, re.S)
    assert stop_form and "data-confirm=" in stop_form.group(0)
    assert "onclick" not in page and "onsubmit" not in page

    paused = client.post(f"/sandboxes/{sandbox}/pause/", follow=True)
    html = paused.content.decode()
    assert status_of(sandbox) == "paused" and "is paused" in html
    assert 'status-paused">paused' in html and f'/sandboxes/{sandbox}/resume/"' in html
    assert 'id="run-form"' in html  # the runner resumes it
    assert 'id="files"' not in html  # listing files would wake it: not on a page view
    assert status_of(sandbox) == "paused"

    stopped = client.post(f"/sandboxes/{sandbox}/stop/", follow=True).content.decode()
    assert status_of(sandbox) == "stopped" and "is stopped" in stopped
    assert ">Start</button>" in stopped
    client.post(f"/sandboxes/{sandbox}/resume/")
    assert status_of(sandbox) == "running"


def test_the_home_list_has_the_buttons_and_comes_back_to_itself(login, sandbox, alice):
    client = login(alice)
    home = client.get("/").content.decode()
    assert f'action="/sandboxes/{sandbox}/pause/"' in home
    assert "Paused sandboxes" in home and "Stopped sandboxes" in home
    answer = client.post(f"/sandboxes/{sandbox}/pause/", {"next": "/"})
    assert answer.status_code == 302 and answer["Location"] == "/"
    foreign = client.post(f"/sandboxes/{sandbox}/resume/", {"next": "https://evil.example/"})
    assert foreign["Location"] == f"/sandboxes/{sandbox}/"  # only a path of this site


def test_a_viewer_sees_no_buttons_and_is_refused(login, sandbox, victor, bob):
    page = login(victor).get(f"/sandboxes/{sandbox}/").content.decode()
    assert "/pause/" not in page and "/stop/" not in page
    assert login(victor).post(f"/sandboxes/{sandbox}/pause/").status_code == 403
    assert login(bob).post(f"/sandboxes/{sandbox}/stop/").status_code == 404
    assert status_of(sandbox) == "running"


def test_a_refusal_comes_back_as_a_message(login, sandbox, alice):
    CommandExecution.objects.create(
        sandbox=Sandbox.objects.get(public_id=sandbox),
        channel=Channel.WEB,
        command="sleep 100",
        status="running",
    )
    html = login(alice).post(f"/sandboxes/{sandbox}/pause/", follow=True).content.decode()
    assert "a command is running" in html and status_of(sandbox) == "running"


@pytest.mark.django_db(transaction=True)  # the command runs in a thread of its own
def test_the_runner_resumes_a_paused_sandbox_and_says_so(login, sandbox, alice, as_alice):
    services.pause_sandbox(as_alice, sandbox)
    response = login(alice).post(
        f"/sandboxes/{sandbox}/run/", {"command": "echo hi"}, HTTP_X_SANDHUB_STREAM="ndjson"
    )
    assert response.status_code == 200
    events = [json.loads(line) for line in read_stream(response).decode().splitlines()]
    assert events[-1]["t"] == "end" and events[-1]["resumed_seconds"] is not None
    assert status_of(sandbox) == "running"
