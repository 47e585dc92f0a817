"""The sandbox page against the live server (uvicorn, platform_site.asgi) and the real Docker
engine: a command's output arrives while it runs, a browser that leaves does not stop (or
double-record) the command, and uploads, downloads, folder archives and file links are
byte-identical."""

from __future__ import annotations

import io
import json
import os
import re
import tarfile
import time
from collections.abc import Iterator

import httpx2 as httpx
import pytest
from django.test import Client

from sandboxes import services
from sandboxes.models import CommandExecution
from tenants.models import AuditLog

pytestmark = pytest.mark.docker

COUNT = "for i in 1 2 3; do echo $i; sleep 1; done"
PAYLOAD = bytes(range(256)) * 4096 + os.urandom(1024 * 1024 + 7)  # 2 MiB and some, every byte


@pytest.fixture(scope="module")
def browser(world, asgi_server) -> Iterator[httpx.Client]:
    """An HTTP client signed in as alice (owner of team A), holding a CSRF token."""
    session = Client()
    session.force_login(world.alice)  # the session row is committed: live_db has no transaction
    with httpx.Client(base_url=asgi_server, timeout=60) as client:
        client.cookies.set("sessionid", session.cookies["sessionid"].value)
        page = client.get("/")
        assert page.status_code == 200, page.text[:300]
        client.headers["X-CSRFToken"] = client.cookies["csrftoken"]
        yield client


def test_output_arrives_while_the_command_runs(browser, shared_sandbox):
    started = time.monotonic()
    arrivals: list[tuple[float, dict]] = []
    with browser.stream(
        "POST",
        f"/sandboxes/{shared_sandbox}/run/",
        data={"command": COUNT},
        headers={"X-Sandhub-Stream": "ndjson"},
    ) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line:
                arrivals.append((time.monotonic() - started, json.loads(line)))
    output = "".join(event["d"] for _, event in arrivals if event["t"] == "out")
    assert output.split() == ["1", "2", "3"]
    first_at = next(at for at, event in arrivals if event["t"] == "out")
    end_at, end = arrivals[-1]
    assert end["t"] == "end" and end["exit_code"] == 0 and end["status"] == "succeeded"
    assert end_at - first_at > 1.5, arrivals  # "1" came two seconds before the end
    assert CommandExecution.objects.filter(command=COUNT).count() == 1
    assert AuditLog.objects.filter(action="command.run", details__command=COUNT).count() == 1


def test_a_browser_that_leaves_does_not_stop_the_command(browser, shared_sandbox, world):
    command = "echo begun; sleep 2; echo finished > /workspace/left.txt; echo done"
    with browser.stream(
        "POST",
        f"/sandboxes/{shared_sandbox}/run/",
        data={"command": command},
        headers={"X-Sandhub-Stream": "ndjson"},
    ) as response:
        first = json.loads(next(response.iter_lines()))
        assert first == {"t": "out", "s": "stdout", "d": "begun\n"}
    # Gone after the first line; the command runs on, and is recorded once when it ends.
    # (The audit row is written as the service returns, just after the history row.)
    audited = AuditLog.objects.filter(action="command.run", details__command=command)
    deadline = time.monotonic() + 30
    while not audited.exists():
        assert time.monotonic() < deadline, "the command never ended"
        time.sleep(0.2)
    execution = CommandExecution.objects.get(command=command)
    assert execution.status == "succeeded" and execution.stdout == "begun\ndone\n"
    time.sleep(0.5)
    assert audited.count() == 1 and audited.get().outcome == "ok"
    content = services.read_file(world.principal(), shared_sandbox, "left.txt").content
    assert content == b"finished\n"


def test_upload_then_download_byte_identical(browser, shared_sandbox, world):
    files = [
        ("files", ("payload.bin", PAYLOAD, "application/octet-stream")),
        ("files", ("notes.txt", b"two files at once\n", "text/plain")),
    ]
    uploaded = browser.post(
        f"/sandboxes/{shared_sandbox}/files/upload/",
        data={"directory": "/workspace/up"},
        files=files,
    )
    assert uploaded.status_code == 302, uploaded.text[:500]
    download = browser.get(
        f"/sandboxes/{shared_sandbox}/files/download/", params={"path": "/workspace/up/payload.bin"}
    )
    assert download.status_code == 200
    assert download.content == PAYLOAD
    assert download.headers["content-disposition"] == 'attachment; filename="payload.bin"'

    archive = browser.get(
        f"/sandboxes/{shared_sandbox}/files/archive/", params={"path": "/workspace/up"}
    )
    assert archive.status_code == 200
    assert archive.headers["content-disposition"] == 'attachment; filename="up.tar.gz"'
    with tarfile.open(fileobj=io.BytesIO(archive.content), mode="r:gz") as tar:
        contents = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    assert contents == {"up/payload.bin": PAYLOAD, "up/notes.txt": b"two files at once\n"}

    # The file's link, used with no session at all.
    made = browser.post(
        f"/sandboxes/{shared_sandbox}/files/link/", data={"path": "/workspace/up/payload.bin"}
    )
    assert made.status_code == 200
    url = re.search(r'class="file-link"[^>]* value="([^"]+)"', made.text).group(1)
    with httpx.Client(timeout=60) as stranger:
        answer = stranger.get(url)
        assert answer.status_code == 200 and answer.content == PAYLOAD
        assert "set-cookie" not in answer.headers
    row = AuditLog.objects.filter(action="files.link.open").latest("id")
    assert row.actor is None and row.team == world.team_a and row.outcome == "ok"


def test_an_unreadable_file_is_no_complete_archive(browser, shared_sandbox, world):
    """A folder the sandbox user cannot read whole is not handed out as a complete archive:
    refused when that shows before the first bytes (a small folder), else broken off."""
    services.run_command(
        world.principal(),
        shared_sandbox,
        "mkdir -p /workspace/locked && echo a > /workspace/locked/a && "
        "echo b > /workspace/locked/b && chmod 000 /workspace/locked/b",
    )
    try:
        response = browser.get(
            f"/sandboxes/{shared_sandbox}/files/archive/",
            params={"path": "/workspace/locked", "format": "tar"},
        )
    except httpx.RemoteProtocolError:
        return  # broken off mid-way: the browser marks the download failed
    assert response.status_code == 400, response.status_code
    assert "permission denied" in response.text
