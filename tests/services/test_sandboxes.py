"""The service layer with an in-memory backend: authorization, quotas, validation, history
and audit. The same flows run against the real Docker engine in test_sandboxes_docker.py."""

from __future__ import annotations

import pytest

from sandboxes import services
from sandboxes.contract.errors import (
    BackendFailure,
    Conflict,
    InvalidInput,
    NotFound,
    PermissionDenied,
    QuotaExceeded,
)
from sandboxes.contract.results import UploadFile
from sandboxes.models import CommandExecution, InvalidTransition, Sandbox, SandboxStatus
from tenants.models import AuditLog, Membership, Role

pytestmark = pytest.mark.django_db


@pytest.fixture
def sandbox(fake_backend, as_alice):
    return services.create_sandbox(as_alice, name="work")


def audit_rows() -> int:
    return AuditLog.objects.count()


def test_create_run_and_delete(fake_backend, as_alice):
    info = services.create_sandbox(as_alice, name="demo", env={"GREETING": "hi"})
    assert info.status == "running" and info.id.startswith("sb_") and info.host == "local"
    assert len(fake_backend.sandboxes) == 1

    result = services.run_command(as_alice, info.id, "echo hello")
    assert (result.status, result.exit_code, result.stdout) == ("succeeded", 0, "hello\n")
    assert services.run_command(as_alice, info.id, "printenv GREETING").stdout == "hi\n"
    assert services.run_command(as_alice, info.id, "exit 3").status == "failed"

    services.delete_sandbox(as_alice, info.id)
    assert fake_backend.sandboxes == {}
    assert Sandbox.objects.get(public_id=info.id).status == SandboxStatus.DELETED
    with pytest.raises(NotFound):
        services.get_sandbox(as_alice, info.id)


def test_files_round_trip(sandbox, as_alice):
    files = [
        UploadFile("src/app.py", b"print('hi')\n"),
        UploadFile("/workspace/data.bin", bytes(range(256))),
    ]
    result = services.upload_files(as_alice, sandbox.id, files)
    assert result.paths == ["/workspace/src/app.py", "/workspace/data.bin"]
    downloaded = dict(services.download_files(as_alice, sandbox.id, ["data.bin", "src"]))
    assert downloaded == {
        "/workspace/data.bin": bytes(range(256)),
        "/workspace/src/app.py": b"print('hi')\n",
    }
    services.write_file(as_alice, sandbox.id, "notes.txt", "0123456789")
    part = services.read_file(as_alice, sandbox.id, "notes.txt", offset=3, max_bytes=4)
    assert (part.content, part.size, part.eof) == (b"3456", 10, False)
    names = {e.name for e in services.list_files(as_alice, sandbox.id)}
    assert names == {"data.bin", "notes.txt", "src"}  # folders too, as a real host lists them


def test_uploads_outside_the_workspace_are_refused(sandbox, as_alice):
    for path in ["../etc/passwd", "/etc/passwd", "/workspace"]:
        with pytest.raises(InvalidInput):
            services.write_file(as_alice, sandbox.id, path, "x")


@pytest.mark.audit_views
def test_every_call_leaves_one_audit_row(sandbox, as_alice):
    calls = [
        lambda: services.get_sandbox(as_alice, sandbox.id),
        lambda: services.list_sandboxes(as_alice),
        lambda: services.run_command(as_alice, sandbox.id, "echo x"),
        lambda: services.write_file(as_alice, sandbox.id, "a.txt", "a"),
        lambda: services.read_file(as_alice, sandbox.id, "a.txt"),
        lambda: services.list_files(as_alice, sandbox.id),
        lambda: services.list_hosts(as_alice),
    ]
    for call in calls:
        before = audit_rows()
        call()
        assert audit_rows() == before + 1
    row = AuditLog.objects.filter(action="command.run").get()
    assert (row.actor.username, row.team.slug, row.channel, row.target_id) == (
        "alice",
        "alpha",
        "web",
        sandbox.id,
    )
    assert row.source_address == "127.0.0.1" and row.details["exit_code"] == 0


def test_failed_calls_are_audited_too(sandbox, as_alice, as_bob):
    before = audit_rows()
    with pytest.raises(NotFound):
        services.run_command(as_bob, sandbox.id, "echo x")
    with pytest.raises(InvalidInput):
        services.run_command(as_alice, sandbox.id, "")
    rows = AuditLog.objects.order_by("-id")[:2]
    assert audit_rows() == before + 2
    assert [r.outcome for r in rows] == ["invalid", "not_found"]


def test_every_command_leaves_one_execution_row(sandbox, as_alice):
    services.run_command(as_alice, sandbox.id, "echo ok")
    services.run_command(as_alice, sandbox.id, "exit 1")
    services.run_command(as_alice, sandbox.id, "sleep 10", timeout=1)
    statuses = list(CommandExecution.objects.order_by("id").values_list("status", flat=True))
    assert statuses == ["succeeded", "failed", "timed_out"]
    timed_out = CommandExecution.objects.get(status="timed_out")
    assert "timed out after 1 s" in timed_out.error_message and timed_out.finished_at


def test_other_team_gets_not_found_from_every_service(sandbox, as_bob):
    sid = sandbox.id
    calls = [
        lambda: services.get_sandbox(as_bob, sid),
        lambda: services.delete_sandbox(as_bob, sid),
        lambda: services.run_command(as_bob, sid, "echo x"),
        lambda: services.run_python(as_bob, sid, "print(1)"),
        lambda: services.install_packages(as_bob, sid, ["six"]),
        lambda: services.upload_files(as_bob, sid, [UploadFile("a", b"a")]),
        lambda: services.write_file(as_bob, sid, "a", "a"),
        lambda: services.download_files(as_bob, sid, ["a"]),
        lambda: services.open_file_stream(as_bob, sid, "a"),
        lambda: services.read_file(as_bob, sid, "a"),
        lambda: services.list_files(as_bob, sid),
        lambda: services.list_commands(as_bob, sid),
    ]
    for call in calls:
        with pytest.raises(NotFound) as caught:
            call()
        # Exactly what a missing sandbox says, so ids cannot be probed.
        assert caught.value.message == f"sandbox {sid} not found"
    assert services.list_sandboxes(as_bob) == []
    command_id = CommandExecution.objects.create(
        sandbox_id=Sandbox.objects.get().pk, channel="web", command="x"
    ).pk
    with pytest.raises(NotFound):
        services.get_command(as_bob, command_id)


def test_missing_and_malformed_ids(fake_backend, as_alice):
    with pytest.raises(NotFound, match="sandbox sb_doesnotexist1 not found"):
        services.get_sandbox(as_alice, "sb_doesnotexist1")
    for bad in ["", "sb_", "../etc", "SB_ABC123", None, 42]:
        with pytest.raises(InvalidInput, match="malformed sandbox id"):
            services.get_sandbox(as_alice, bad)


def test_viewer_reads_but_never_changes(sandbox, as_victor):
    assert services.get_sandbox(as_victor, sandbox.id).id == sandbox.id
    assert len(services.list_sandboxes(as_victor)) == 1
    writes = [
        lambda: services.create_sandbox(as_victor),
        lambda: services.run_command(as_victor, sandbox.id, "echo x"),
        lambda: services.write_file(as_victor, sandbox.id, "a.txt", "a"),
        lambda: services.upload_files(as_victor, sandbox.id, [UploadFile("a", b"a")]),
        lambda: services.delete_sandbox(as_victor, sandbox.id),
    ]
    for call in writes:
        with pytest.raises(PermissionDenied, match="viewer"):
            call()
    assert CommandExecution.objects.count() == 0
    assert Sandbox.objects.get().status == "running"


def test_lowered_role_and_removed_membership_apply_at_once(sandbox, as_alice, alice):
    Membership.objects.filter(user=alice).update(role=Role.VIEWER)
    with pytest.raises(PermissionDenied):
        services.run_command(as_alice, sandbox.id, "echo x")
    Membership.objects.filter(user=alice).delete()
    with pytest.raises(NotFound):
        services.get_sandbox(as_alice, sandbox.id)


def test_api_key_scopes_limit_the_role(sandbox, alice, team_a):
    from tenants.principal import Principal

    read_only = Principal(user=alice, team=team_a, channel="api", scopes=frozenset({"read"}))
    assert services.get_sandbox(read_only, sandbox.id).id == sandbox.id
    with pytest.raises(PermissionDenied, match="write scope"):
        services.run_command(read_only, sandbox.id, "echo x")


def test_running_quota_refuses_with_a_clear_message(fake_backend, as_alice):
    for _ in range(3):
        services.create_sandbox(as_alice)
    with pytest.raises(QuotaExceeded, match="at most 3 running sandboxes"):
        services.create_sandbox(as_alice)
    assert Sandbox.objects.count() == 3 and len(fake_backend.sandboxes) == 3


def test_limit_quotas_refuse_and_create_nothing(fake_backend, as_alice):
    with pytest.raises(QuotaExceeded, match="MB of memory per sandbox"):
        services.create_sandbox(as_alice, memory_mb=999_999)
    with pytest.raises(QuotaExceeded, match="cpus per sandbox"):
        services.create_sandbox(as_alice, cpus=64)
    with pytest.raises(QuotaExceeded, match="minutes"):
        services.create_sandbox(as_alice, lifetime_minutes=10**6)
    with pytest.raises(PermissionDenied, match="network"):
        services.create_sandbox(as_alice, network=True)
    assert Sandbox.objects.count() == 0 and fake_backend.sandboxes == {}


def test_bad_create_input_creates_nothing(fake_backend, as_alice):
    bad = [
        {"image": "no-such-image"},
        {"memory_mb": -5},
        {"cpus": "lots"},
        {"env": {"BAD NAME": "x"}},
        {"env": {"OK": "nul\x00byte"}},
        {"name": "x" * 500},
    ]
    for kwargs in bad:
        with pytest.raises(InvalidInput):
            services.create_sandbox(as_alice, **kwargs)
    assert Sandbox.objects.count() == 0 and fake_backend.sandboxes == {}


def test_failed_provisioning_leaves_no_live_sandbox(fake_backend, as_alice):
    fake_backend.fail_provision = "image sandhub/sandbox:latest is not present"
    with pytest.raises(BackendFailure, match="not present"):
        services.create_sandbox(as_alice)
    assert services.list_sandboxes(as_alice) == []
    assert Sandbox.objects.get().status == SandboxStatus.DELETED


def test_bad_command_input(sandbox, as_alice):
    bad = [
        lambda: services.run_command(as_alice, sandbox.id, ""),
        lambda: services.run_command(as_alice, sandbox.id, "   "),
        lambda: services.run_command(as_alice, sandbox.id, "echo \x00"),
        lambda: services.run_command(as_alice, sandbox.id, "echo x", timeout=-1),
        lambda: services.run_command(as_alice, sandbox.id, "echo x", timeout=10**9),
        lambda: services.run_command(as_alice, sandbox.id, "echo x", timeout="soon"),
        lambda: services.run_command(as_alice, sandbox.id, "echo x", cwd="/tmp/\x00"),
        lambda: services.read_file(as_alice, sandbox.id, "a\x00b"),
        lambda: services.install_packages(as_alice, sandbox.id, ["--index-url=http://evil"]),
    ]
    for call in bad:
        with pytest.raises(InvalidInput):
            call()
    assert CommandExecution.objects.count() == 0


def test_output_is_capped_with_true_byte_count(sandbox, as_alice):
    result = services.run_command(as_alice, sandbox.id, "yes | head -c 3000000", output_cap=10_000)
    assert result.stdout_truncated and result.stdout_bytes == 3_000_000
    assert len(result.stdout) < 10_100 and "bytes cut" in result.stdout


def test_commands_need_a_running_sandbox(sandbox, as_alice):
    # A paused or stopped one is resumed first (tests/services/test_lifecycle.py); one in
    # error is not.
    Sandbox.objects.filter(public_id=sandbox.id).update(status=SandboxStatus.ERROR)
    with pytest.raises(Conflict, match="error, not running"):
        services.run_command(as_alice, sandbox.id, "echo x")


def test_vanished_container_marks_the_sandbox_lost(sandbox, as_alice, fake_backend):
    fake_backend.sandboxes.clear()
    with pytest.raises(BackendFailure):
        services.run_command(as_alice, sandbox.id, "echo x")
    assert Sandbox.objects.get().status == SandboxStatus.LOST
    assert CommandExecution.objects.get().status == "error"


def test_undecodable_output_is_kept_faithfully():
    assert services.decode_output(b"ok \xff\xfe \x00 end") == "ok \\xff\\xfe \\x00 end"


def test_lifecycle_refuses_illegal_transitions(sandbox):
    row = Sandbox.objects.get()
    with pytest.raises(InvalidTransition):
        row.transition(SandboxStatus.PENDING)
    row.transition(SandboxStatus.STOPPING)
    row.transition(SandboxStatus.DELETED)
    with pytest.raises(InvalidTransition):
        row.transition(SandboxStatus.RUNNING)


def test_placement_prefers_the_idlest_host_with_room(fake_backend, as_alice, docker_host, team_b):
    from hosts.models import Host

    Host.objects.create(name="busy", kind="docker", endpoint="x", idle_score=0.1)
    idle = Host.objects.create(name="idle", kind="docker", endpoint="y", idle_score=0.9)
    Host.objects.create(name="drained", kind="docker", endpoint="z", idle_score=1.0, draining=True)
    Host.objects.create(name="private-b", kind="docker", endpoint="w", idle_score=1.0, team=team_b)
    docker_host.idle_score = 0.5
    docker_host.save()
    assert services.create_sandbox(as_alice).host == idle.name
    idle.max_sandboxes = 1
    idle.save()
    assert services.create_sandbox(as_alice).host == "local"


def test_probe_stores_an_idle_score(fake_backend, docker_host, alice):
    from tenants.models import Channel
    from tenants.principal import Principal

    alice.is_staff = True
    alice.save()
    admin = Principal(user=alice, team=None, channel=Channel.ADMIN)
    info = services.probe_host(admin, docker_host.pk)
    assert info.healthy and info.idle_score == 0.8  # memory 20 % is the busiest resource
    with pytest.raises(PermissionDenied):
        services.probe_host(Principal(user=alice, team=None, channel="web"), docker_host.pk)


def test_rename_is_audited_and_viewer_refused(sandbox, as_alice, as_victor):
    assert services.rename_sandbox(as_alice, sandbox.id, "renamed").name == "renamed"
    row = AuditLog.objects.filter(action="sandbox.rename").get()
    assert row.details == {"from": "work", "to": "renamed"}
    with pytest.raises(PermissionDenied):
        services.rename_sandbox(as_victor, sandbox.id, "nope")


def test_stream_errors_are_raised_by_the_call(sandbox, as_alice):
    services.write_file(as_alice, sandbox.id, "dir/a.txt", "a")
    with pytest.raises(NotFound):
        services.open_file_stream(as_alice, sandbox.id, "missing.txt")
    assert b"".join(services.open_file_stream(as_alice, sandbox.id, "dir/a.txt")) == b"a"


def test_download_limit_is_enforced(sandbox, as_alice):
    services.write_file(as_alice, sandbox.id, "big.bin", b"x" * 5000)
    with pytest.raises(InvalidInput, match="more than 1000 bytes"):
        services.download_files(as_alice, sandbox.id, ["big.bin"], max_bytes=1000)


@pytest.mark.audit_views
def test_audit_row_names_the_api_key(sandbox, alice, team_a):
    from tenants.principal import Principal

    keyed = Principal(user=alice, team=team_a, channel="api", extra={"api_key": "shk_abcd1234"})
    services.get_sandbox(keyed, sandbox.id)
    assert AuditLog.objects.filter(action="sandbox.get").get().details["api_key"] == "shk_abcd1234"
