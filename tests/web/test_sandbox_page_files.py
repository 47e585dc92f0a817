"""The sandbox page's files section through the test client on the in-memory backend:
browse, upload several files, view and edit text, create a file, download a file or a folder
(tar / tar.gz); bad input is shown beside its field and changes nothing. Who may do what on
these URLs (404 across teams, viewers, CSRF) is tested in test_sandbox_page.py."""

from __future__ import annotations

import io
import tarfile

import pytest

from sandboxes import services
from sandboxes.contract.errors import InvalidInput
from sandboxes.contract.results import UploadFile
from tenants.models import AuditLog
from tests.web.helpers import field_errors, files_of, read_stream

pytestmark = pytest.mark.django_db


# --- files -----------------------------------------------------------------------------------


def test_browse_swaps_the_files_section(login, sandbox, alice, as_alice):
    services.write_file(as_alice, sandbox, "src/app.py", "print(1)\n")
    client = login(alice)
    section = client.get(f"/sandboxes/{sandbox}/files/?path=/workspace/src", HTTP_HX_REQUEST="true")
    html = section.content.decode()
    assert section.status_code == 200 and html.lstrip().startswith("{%") is False
    assert 'id="files"' in html and "app.py" in html and "<html" not in html
    plain = client.get(f"/sandboxes/{sandbox}/files/?path=/workspace/src")
    assert plain.status_code == 302 and plain["Location"].endswith("?path=%2Fworkspace%2Fsrc#files")
    page = client.get(plain["Location"].split("#")[0]).content.decode()
    assert "app.py" in page
    missing = client.get(f"/sandboxes/{sandbox}/?path=/workspace/nope").content.decode()
    assert 'id="files-error"' in missing


def test_upload_several_files(login, sandbox, alice):
    first, second = io.BytesIO(b"one\n"), io.BytesIO(bytes(range(256)))
    first.name, second.name = "one.txt", "two.bin"
    response = login(alice).post(
        f"/sandboxes/{sandbox}/files/upload/",
        {"files": [first, second], "directory": "/workspace/in"},
    )
    assert response.status_code == 302
    files = files_of(sandbox)
    assert files["/workspace/in/one.txt"] == b"one\n"
    assert files["/workspace/in/two.bin"] == bytes(range(256))
    row = AuditLog.objects.get(action="files.upload")
    assert row.channel == "web" and row.details["bytes"] == 260


@pytest.mark.parametrize(
    "data, field",
    [
        ({}, "files"),
        ({"directory": "/etc"}, "files"),
    ],
)
def test_upload_with_bad_input_changes_nothing(login, sandbox, alice, data, field):
    payload = dict(data)
    if data:
        upload = io.BytesIO(b"x")
        upload.name = "x.txt"
        payload["files"] = upload
    response = login(alice).post(f"/sandboxes/{sandbox}/files/upload/", payload)
    assert response.status_code == 400
    assert field_errors(response.content.decode(), field)
    assert files_of(sandbox) == {"/workspace/a.txt": b"hello\n"}


def test_view_and_edit_a_text_file(login, sandbox, alice):
    client = login(alice)
    view = client.get(f"/sandboxes/{sandbox}/files/view/?path=a.txt").content.decode()
    assert 'id="edit-form"' in view and "hello" in view
    saved = client.post(
        f"/sandboxes/{sandbox}/files/save/", {"path": "/workspace/a.txt", "content": "new\r\ntext"}
    )
    assert saved.status_code == 302
    assert files_of(sandbox)["/workspace/a.txt"] == b"new\ntext"


def test_create_a_text_file_in_the_folder_shown(login, sandbox, alice):
    response = login(alice).post(
        f"/sandboxes/{sandbox}/files/new/",
        {"path": "notes/todo.md", "content": "- test\n", "directory": "/workspace"},
    )
    assert response.status_code == 302
    assert files_of(sandbox)["/workspace/notes/todo.md"] == b"- test\n"


@pytest.mark.parametrize(
    "data",
    [
        {"path": "", "content": "x"},
        {"path": "/etc/passwd", "content": "x"},
        {"path": "../../etc/x", "content": "x"},
        {"path": "big.txt", "content": "x" * (256 * 1024 + 1)},
    ],
)
def test_create_with_bad_input_writes_nothing(login, sandbox, alice, data):
    response = login(alice).post(f"/sandboxes/{sandbox}/files/new/", data)
    assert response.status_code == 400
    html = response.content.decode()
    assert field_errors(html, "path") or field_errors(html, "content")
    assert files_of(sandbox) == {"/workspace/a.txt": b"hello\n"}


def test_download_a_file(login, sandbox, alice, as_alice):
    services.upload_files(
        as_alice, sandbox, [UploadFile(path="data.bin", content=bytes(range(256)) * 3)]
    )
    response = login(alice).get(f"/sandboxes/{sandbox}/files/download/?path=data.bin")
    assert response.status_code == 200
    assert response["Content-Disposition"] == 'attachment; filename="data.bin"'
    assert b"".join(response.streaming_content) == bytes(range(256)) * 3


def test_download_refusals_are_pages(login, sandbox, alice):
    client = login(alice)
    assert client.get(f"/sandboxes/{sandbox}/files/download/?path=nope").status_code == 404
    assert client.get(f"/sandboxes/{sandbox}/files/download/").status_code == 400


def test_download_a_folder_as_an_archive(login, sandbox, alice, as_alice):
    services.write_file(as_alice, sandbox, "src/app.py", "print(1)\n")
    services.write_file(as_alice, sandbox, "src/lib/util.py", "X = 2\n")
    client = login(alice)
    for fmt, mode, suffix in [("tgz", "r:gz", ".tar.gz"), ("tar", "r:", ".tar")]:
        response = client.get(f"/sandboxes/{sandbox}/files/archive/?path=src&format={fmt}")
        assert response.status_code == 200
        assert response["Content-Disposition"] == f'attachment; filename="src{suffix}"'
        with tarfile.open(fileobj=io.BytesIO(read_stream(response)), mode=mode) as archive:
            contents = {
                m.name: archive.extractfile(m).read() for m in archive.getmembers() if m.isfile()
            }
        assert contents == {"src/app.py": b"print(1)\n", "src/lib/util.py": b"X = 2\n"}
    assert AuditLog.objects.filter(action="files.archive", outcome="ok").count() == 2


def test_an_archive_past_the_transfer_limit_is_refused_or_broken_off(sandbox, as_alice, settings):
    files = [UploadFile(path=f"big/{n}.bin", content=bytes([n]) * 40 * 1024) for n in range(4)]
    services.upload_files(as_alice, sandbox, files)
    services.write_file(as_alice, sandbox, "small/a", "x" * 60 * 1024)
    services.write_file(as_alice, sandbox, "small/b", "y" * 60 * 1024)
    settings.SANDHUB_MAX_TRANSFER_BYTES = 100 * 1024
    # Small enough to be found out before the first bytes leave: a refusal.
    with pytest.raises(InvalidInput, match="more than 102400 bytes"):
        services.open_archive_stream(as_alice, sandbox, "small")
    # Found out after the first 64 KiB went: the stream breaks off (no short archive).
    stream = services.open_archive_stream(as_alice, sandbox, "big")
    first = next(stream)
    assert len(first) >= 64 * 1024
    with pytest.raises(InvalidInput, match="more than 102400 bytes"):
        list(stream)
    stream.close()
