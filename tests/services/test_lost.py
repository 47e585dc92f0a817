"""A sandbox whose container vanished behind the platform's back is marked lost the same way by
every service that reaches its backend (commands, files), and deleting it just deletes it."""

from __future__ import annotations

import pytest

from sandboxes import services
from sandboxes.contract.errors import BackendFailure
from sandboxes.contract.results import UploadFile
from sandboxes.models import Sandbox, SandboxStatus
from tenants.models import AuditLog

pytestmark = pytest.mark.django_db

CALLS = {
    "run_command": lambda p, sid: services.run_command(p, sid, "echo x"),
    "list_files": lambda p, sid: services.list_files(p, sid, "/workspace"),
    "read_file": lambda p, sid: services.read_file(p, sid, "/workspace/a.txt"),
    "write_file": lambda p, sid: services.write_file(p, sid, "a.txt", b"x"),
    "upload_files": lambda p, sid: services.upload_files(p, sid, [UploadFile("b.txt", b"y")]),
    "download_files": lambda p, sid: services.download_files(p, sid, ["/workspace/a.txt"]),
    "open_file_stream": lambda p, sid: services.open_file_stream(p, sid, "/workspace/a.txt"),
}


@pytest.mark.parametrize("call", sorted(CALLS))
def test_every_backend_service_marks_a_vanished_sandbox_lost(call, fake_backend, as_alice):
    sandbox = services.create_sandbox(as_alice, name="work")
    services.write_file(as_alice, sandbox.id, "a.txt", b"hello")
    fake_backend.sandboxes.clear()  # the container is gone

    with pytest.raises(BackendFailure, match="container is gone"):
        CALLS[call](as_alice, sandbox.id)

    row = Sandbox.objects.get(public_id=sandbox.id)
    assert row.status == SandboxStatus.LOST
    assert "container is gone" in row.status_message
    failed = AuditLog.objects.filter(target_id=sandbox.id).order_by("-pk").first()
    assert failed is not None and failed.outcome != "ok"


def test_deleting_a_lost_sandbox_deletes_it(fake_backend, as_alice):
    sandbox = services.create_sandbox(as_alice, name="work")
    fake_backend.sandboxes.clear()
    with pytest.raises(BackendFailure):
        services.list_files(as_alice, sandbox.id)

    deleted = services.delete_sandbox(as_alice, sandbox.id)

    assert deleted.status == SandboxStatus.DELETED
    assert Sandbox.objects.get(public_id=sandbox.id).deleted_at is not None


def test_lost_is_not_written_over_a_sandbox_being_deleted(fake_backend, as_alice):
    sandbox = services.create_sandbox(as_alice, name="work")
    row = Sandbox.objects.get(public_id=sandbox.id)
    Sandbox.objects.filter(pk=row.pk).update(status=SandboxStatus.STOPPING)
    row.refresh_from_db()
    from sandboxes.services.common import mark_lost

    mark_lost(row, "gone")
    assert Sandbox.objects.get(pk=row.pk).status == SandboxStatus.STOPPING
