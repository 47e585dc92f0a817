"""The service layer on an SSH host, end to end against a real OpenSSH sshd on loopback: the
host key fetched and confirmed by an admin, then sandboxes created, used and deleted through
sandboxes.services exactly as on Docker; each sandbox with a Unix user of its own (the login
user may sudo), GPUs from the fake nvidia-smi (the real H100 outputs)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from hosts.backends import reset_backends
from hosts.backends.ssh.connection import SshConnection
from hosts.models import Host
from sandboxes import services
from sandboxes.contract.errors import BackendFailure, NoCapacity, NotFound
from sandboxes.contract.results import UploadFile
from sandboxes.models import CommandExecution, Sandbox
from tenants.models import AuditLog
from tenants.principal import Principal
from tests.services.helpers import final_row, wait_for
from tests.ssh.helpers import host_on
from tests.ssh.logins import SUDO_USER, ProvisionSshd
from tests.ssh.sshd import Sshd

pytestmark = [pytest.mark.sshd, pytest.mark.django_db(transaction=True)]
SYSTEM = Principal.system()


def outside(server: Sshd, command: str) -> str:
    """A command over a connection of the test's own, as the login user."""
    with SshConnection(server.target(username=SUDO_USER)) as conn:
        return conn.run(command, timeout=30).stdout.decode()


def test_a_host_is_used_only_after_its_key_is_fetched_and_confirmed(
    ssh_host: Host, server: Sshd, as_alice
) -> None:
    with pytest.raises(NoCapacity):
        services.create_sandbox(as_alice)  # not pinned: not offered
    info = services.fetch_host_key(SYSTEM, ssh_host.pk)
    assert info.fingerprint == server.fingerprint and not info.confirmed
    confirmed = services.confirm_host_key(SYSTEM, ssh_host.pk, info.fingerprint)
    assert confirmed.confirmed and confirmed.pinned == server.fingerprint
    rows = AuditLog.objects.filter(target_type="host").order_by("pk")
    actions = list(rows.values_list("action", flat=True))
    assert actions == ["host.key.fetch", "host.key.confirm"]
    probed = services.probe_host(SYSTEM, ssh_host.pk)
    assert probed.healthy
    ssh_host.refresh_from_db()
    assert ssh_host.per_sandbox_users is True
    created = services.create_sandbox(as_alice)
    assert Sandbox.objects.get(public_id=created.id).host == ssh_host
    services.delete_sandbox(as_alice, created.id)


def test_the_whole_flow_on_an_ssh_host(pinned: Host, server: Sshd, as_alice, as_bob) -> None:
    info = services.create_sandbox(as_alice)
    state = Sandbox.objects.get(public_id=info.id).backend_state
    try:
        seen: list[bytes] = []
        ran = services.run_command(
            as_alice,
            info.id,
            "echo out; echo err >&2; whoami; pwd; exit 3",
            on_output=lambda stream, chunk: seen.append(chunk),
        )
        assert (ran.exit_code, ran.stderr) == (3, "err\n")
        assert ran.stdout == f"out\n{state['user']}\n{state['workspace']}\n"
        assert b"out\n" in b"".join(seen)
        # Team B does not see it.
        with pytest.raises(NotFound):
            services.run_command(as_bob, info.id, "true")

        slow = services.run_command(
            as_alice, info.id, "sleep 300 & sleep 301 & sleep 302", timeout=1
        )
        assert slow.status == "timed_out"
        assert "sleep 30" not in outside(server, f"ps -u {state['user']} -o args=")

        big = services.run_command(as_alice, info.id, "head -c 50000000 /dev/zero", output_cap=4096)
        assert big.stdout_truncated and big.stdout_bytes == 50_000_000

        payload = bytes(range(256)) * 1000
        services.upload_files(as_alice, info.id, [UploadFile("data/blob.bin", payload)])
        read = services.read_file(as_alice, info.id, "/workspace/data/blob.bin", max_bytes=1 << 20)
        assert read.size == len(payload)
        files = services.download_files(as_alice, info.id, ["/workspace/data"])
        assert files == [("/workspace/data/blob.bin", payload)]
    finally:
        services.delete_sandbox(as_alice, info.id)
    assert outside(server, f"id -u {state['user']} 2>/dev/null; ls -d {state['dir']} 2>&1") != ""
    assert "No such file" in outside(server, f"ls -d {state['dir']} 2>&1")
    assert outside(server, f"getent passwd {state['user']}") == ""


def test_background_jobs_survive_the_connection_and_cancel_leaves_nothing(
    pinned: Host, server: Sshd, as_alice
) -> None:
    info = services.create_sandbox(as_alice)
    state = Sandbox.objects.get(public_id=info.id).backend_state
    try:
        job = services.start_background(as_alice, info.id, "sleep 1; echo done; exit 5")
        reset_backends()  # every agent channel and connection of this process goes
        deadline = time.monotonic() + 30
        check = services.check_background(as_alice, info.id, job.id)
        while check.running and time.monotonic() < deadline:
            time.sleep(0.2)
            check = services.check_background(as_alice, info.id, job.id)
        assert (check.exit_code, check.output) == (5, "done\n")
        assert CommandExecution.objects.get(pk=job.id).exit_code == 5

        endless = services.start_background(as_alice, info.id, "sleep 600 & sleep 601")
        cancelled = services.cancel_background(as_alice, info.id, endless.id)
        assert cancelled.status == "cancelled"
        assert "sleep 60" not in outside(server, f"ps -u {state['user']} -o args=")
    finally:
        services.delete_sandbox(as_alice, info.id)


def test_gpus_from_the_probe_are_given_to_sandboxes(pinned: Host, as_alice) -> None:
    assert pinned.gpu_count == 2  # the fake nvidia-smi: an idle and a busy H100
    info = services.create_sandbox(as_alice, gpus=1)
    try:
        assert Sandbox.objects.get(public_id=info.id).gpus == [0]  # the idle one
        ran = services.run_command(as_alice, info.id, "echo $CUDA_VISIBLE_DEVICES")
        assert ran.stdout == "0\n"
        (host,) = [h for h in services.list_hosts(as_alice) if h.name == "gpu-box"]
        assert [g.index for g in host.gpus] == [0, 1] and host.gpus[1].busy_percent > 20
        with pytest.raises(NoCapacity, match="no host of yours has 9 GPUs"):
            services.create_sandbox(as_alice, gpus=9)
    finally:
        services.delete_sandbox(as_alice, info.id)


def test_a_changed_host_key_refuses_every_connection_with_an_audit_row(
    workdir: Path,
    settings,
    docker_host,
    image,
    as_alice,
) -> None:
    own = ProvisionSshd().start()  # its keys change below: not the module's server
    try:
        for host in host_on(own, workdir, settings, docker_host):
            info = services.fetch_host_key(SYSTEM, host.pk)
            services.confirm_host_key(SYSTEM, host.pk, info.fingerprint)
            assert services.probe_host(SYSTEM, host.pk).healthy
            own.rotate_host_keys()
            reset_backends()
            probed = services.probe_host(SYSTEM, host.pk)
            assert not probed.healthy and "changed" in probed.last_error
            host.refresh_from_db()
            assert host.host_key_seen == own.fingerprint != host.host_key_pinned
            row = AuditLog.objects.get(action="host.key.rejected")
            assert row.outcome == "refused" and row.details["presented"] == own.fingerprint
            with pytest.raises((NoCapacity, BackendFailure)):
                services.create_sandbox(as_alice)  # down, and refused if it were tried
    finally:
        own.close()


def test_an_ssh_job_is_recorded_by_the_worker_across_a_worker_crash(
    pinned: Host, server: Sshd, as_alice, qcluster
) -> None:
    info = services.create_sandbox(as_alice)
    user = Sandbox.objects.get(public_id=info.id).backend_state["user"]
    try:
        job = services.start_background(as_alice, info.id, "sleep 4; echo finished; exit 7")
        lease = wait_for(
            lambda: CommandExecution.objects.get(pk=job.id).background_state.get("supervisor"),
            15,
            "a worker to supervise the command",
        )
        qcluster.kill()  # SIGKILL to the whole cluster, mid-supervision
        assert CommandExecution.objects.get(pk=job.id).status == "running"
        assert "sleep 4" in outside(server, f"ps -u {user} -o args=")  # the job lives on
        qcluster.start()
        row = final_row(job.id, 40)
        assert (row.status, row.exit_code, row.stdout) == ("failed", 7, "finished\n")
        assert row.background_state["supervisor"]["pid"] != lease["pid"]
    finally:
        services.delete_sandbox(as_alice, info.id)
