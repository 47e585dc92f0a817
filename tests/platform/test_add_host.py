"""`manage.py add_host` against a real OpenSSH sshd on loopback (and the local Docker engine):
without --fingerprint the host key is shown and nothing saved; with it the host is checked,
logged in to, probed and saved pinned, and sandboxes then run on it; a wrong fingerprint,
key or password is a clear error that saves nothing and leaves an audit row."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from hosts.backends import reset_backends
from hosts.models import Credential, Host
from sandboxes import services
from sandboxes.contract.errors import PermissionDenied
from sandboxes.models import Sandbox
from tenants.models import AuditLog
from tests.ssh.logins import SUDO_USER
from tests.ssh.sshd import Sshd, keygen_fingerprint

pytestmark = pytest.mark.django_db(transaction=True)
VIA = "manage.py add_host"


@pytest.fixture(autouse=True)
def real_backends(settings) -> Iterator[None]:
    settings.SANDHUB_BACKENDS = {
        "docker": "hosts.backends.docker.DockerBackend",
        "ssh": "hosts.backends.ssh.backend.SshBackend",
    }
    reset_backends()
    yield
    reset_backends()


def add_host(*args: str) -> str:
    """Run the command; what it printed (stdout and stderr)."""
    out, err = StringIO(), StringIO()
    call_command("add_host", *args, stdout=out, stderr=err)
    return out.getvalue() + err.getvalue()


def ssh_url(server: Sshd, user: str) -> str:
    return f"ssh://{user}@{server.address}:{server.port}"


def key_file(server: Sshd, name: str = "ed25519") -> str:
    return str(server.client_keys[name].path)


def assert_nothing_saved() -> None:
    assert list(Host.objects.values_list("name", flat=True)) == []
    assert list(Credential.objects.values_list("name", flat=True)) == []


def logins_since(server: Sshd, offset: int) -> list[str]:
    """sshd's log lines about login attempts (accepted or failed) since `offset`."""
    return [
        line for line in server.log(offset).splitlines() if "Accepted " in line or "Failed " in line
    ]


def log_size(server: Sshd) -> int:
    return len(server.log().encode())


def test_without_fingerprint_it_shows_the_host_key_and_saves_nothing(
    server: Sshd, workdir: Path
) -> None:
    offset = log_size(server)
    out = add_host("gpu-01", ssh_url(server, SUDO_USER), "--key-file", key_file(server))
    reference = keygen_fingerprint(server.host_key_path("ed25519").with_suffix(".pub"))
    assert f"ssh-ed25519 {reference}" in out
    assert "ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub" in out
    assert f"--fingerprint {reference}" in out
    assert "Nothing was saved." in out
    assert server.client_keys["ed25519"].text not in out
    assert_nothing_saved()
    assert logins_since(server, offset) == []  # the key was read, no login tried
    row = AuditLog.objects.get(action="host.key.read")
    assert row.outcome == "ok"
    assert row.details["fingerprint"] == reference
    assert row.details["endpoint"] == f"{server.address}:{server.port}"
    assert row.details["via"] == VIA


def test_with_fingerprint_it_saves_a_pinned_host_that_sandboxes_use(
    server: Sshd, workdir: Path, image, as_alice
) -> None:
    key = server.client_keys["ed25519"]
    base = str(workdir / "base")
    out = add_host(
        "gpu-01",
        ssh_url(server, SUDO_USER),
        "--key-file",
        str(key.path),
        "--fingerprint",
        server.fingerprint,
        "--base-dir",
        base,
        "--max-sandboxes",
        "7",
    )
    host = Host.objects.get(name="gpu-01")
    assert (host.kind, host.endpoint, host.base_dir) == ("ssh", f"127.0.0.1:{server.port}", base)
    assert (host.host_key_pinned, host.host_key_type) == (server.fingerprint, "ssh-ed25519")
    assert host.max_sandboxes == 7 and host.team is None
    assert host.healthy and host.last_probe_at is not None
    assert host.per_sandbox_users is True and host.gpu_count == 2  # the fake nvidia-smi's
    assert host.isolated is True and host.isolation_missing == ""  # this machine can
    credential = host.credential
    assert credential is not None
    assert (credential.kind, credential.username) == ("private_key", SUDO_USER)
    assert credential.get_secret() == key.text
    assert key.text.splitlines()[1] not in credential.secret_encrypted  # encrypted at rest
    assert "added ssh host gpu-01" in out
    assert "per-sandbox users: yes" in out and "sudo -n: yes" in out
    assert "isolated: yes" in out and "user namespaces: yes" in out
    assert "GPUs: 2 (0: NVIDIA H100" in out
    assert key.text.splitlines()[1] not in out
    row = AuditLog.objects.get(action="host.add")
    assert (row.outcome, row.target_id, row.details["via"]) == ("ok", str(host.pk), VIA)

    created = services.create_sandbox(as_alice)
    try:
        assert Sandbox.objects.get(public_id=created.id).host == host
        ran = services.run_command(as_alice, created.id, "echo hi")
        assert (ran.exit_code, ran.stdout) == (0, "hi\n")
    finally:
        services.delete_sandbox(as_alice, created.id)
    assert Sandbox.objects.get(public_id=created.id).status == "deleted"


def test_a_wrong_fingerprint_is_refused_before_any_login(server: Sshd, workdir: Path) -> None:
    offset = log_size(server)
    other = server.host_fingerprints["ssh-rsa"]  # a real key of the host, not the one shown
    with pytest.raises(CommandError) as refused:
        add_host(
            "gpu-01",
            ssh_url(server, SUDO_USER),
            "--key-file",
            key_file(server),
            "--fingerprint",
            other,
        )
    message = str(refused.value)
    assert f"presented the host key ssh-ed25519 {server.fingerprint}, not {other}" in message
    assert "nothing was saved" in message
    assert_nothing_saved()
    assert logins_since(server, offset) == []
    row = AuditLog.objects.get(action="host.add")
    assert row.outcome == "conflict"
    assert (row.details["presented"], row.details["fingerprint"]) == (server.fingerprint, other)


def test_a_wrong_password_is_refused_and_never_printed(
    server: Sshd, workdir: Path, monkeypatch
) -> None:
    monkeypatch.setenv("GPU_PASSWORD", "not-the-password-" + server.password[:4])
    with pytest.raises(CommandError) as refused:
        add_host(
            "gpu-01",
            ssh_url(server, server.username),
            "--password-env",
            "GPU_PASSWORD",
            "--fingerprint",
            server.fingerprint,
        )
    message = str(refused.value)
    assert message == (
        f"authentication failed for user {server.username} on 127.0.0.1:{server.port}: the "
        "server did not accept the password; nothing was saved"
    )
    assert "not-the-password" not in message
    assert_nothing_saved()
    row = AuditLog.objects.get(action="host.add")
    assert row.outcome == "backend"
    assert "not-the-password" not in str(row.details)


def test_a_key_the_host_does_not_know_is_refused(server: Sshd, workdir: Path) -> None:
    with pytest.raises(CommandError) as refused:
        add_host(
            "gpu-01",
            ssh_url(server, SUDO_USER),
            "--key-file",
            str(server.stranger_key.path),
            "--fingerprint",
            server.fingerprint,
        )
    stranger = keygen_fingerprint(server.stranger_key.path.with_suffix(".pub"))
    assert str(refused.value) == (
        f"authentication failed for user {SUDO_USER} on 127.0.0.1:{server.port}: the server "
        f"did not accept the private key (ssh-ed25519 {stranger}); nothing was saved"
    )
    assert_nothing_saved()
    assert AuditLog.objects.get(action="host.add").outcome == "backend"


def test_a_password_login_without_sudo_makes_a_private_host(
    server: Sshd, workdir: Path, team_a, monkeypatch
) -> None:
    monkeypatch.setenv("GPU_PASSWORD", server.password)
    out = add_host(
        "build-01",
        ssh_url(server, server.username),
        "--password-env",
        "GPU_PASSWORD",
        "--fingerprint",
        server.fingerprint,
        "--team",
        team_a.slug,
        "--base-dir",
        str(workdir / "plain"),
    )
    host = Host.objects.get(name="build-01")
    assert host.team == team_a and host.per_sandbox_users is False
    assert host.credential is not None and host.credential.kind == "password"
    assert host.credential.get_secret() == server.password
    assert "per-sandbox users: no" in out and "private to team alpha" in out
    assert host.isolated is False and "no sudo -n" in host.isolation_missing
    assert "isolated: no: offered only to the team it is private to\n" in out
    assert "    - no sudo -n: no per-sandbox users\n" in out
    assert server.password not in out
    assert AuditLog.objects.get(action="host.add").team == team_a


def test_a_key_with_a_passphrase_from_the_environment(
    server: Sshd, workdir: Path, monkeypatch
) -> None:
    key = server.client_keys["ed25519-passphrase"]
    assert key.passphrase
    monkeypatch.setenv("KEY_PASSPHRASE", key.passphrase)
    add_host("gpu-02", ssh_url(server, SUDO_USER), "--key-file", str(key.path),
             "--passphrase-env", "KEY_PASSPHRASE", "--fingerprint", server.fingerprint,
             "--base-dir", str(workdir / "base"))  # fmt: skip
    credential = Host.objects.get(name="gpu-02").credential
    assert credential is not None and credential.get_passphrase() == key.passphrase
    assert key.passphrase not in credential.passphrase_encrypted


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["ssh://someone:secret@127.0.0.1:22", "--password-env", "PATH"], "no password in the"),
        (["tcp://127.0.0.1:2375"], "only with TLS material"),
        (
            ["unix:///var/run/docker.sock", "--fingerprint", "SHA256:abc"],
            "only an SSH host has a host key",
        ),
        (["ssh://someone@127.0.0.1:22"], "needs --key-file or --password-env"),
        (["ssh://someone@127.0.0.1:22", "--password-env", "SANDHUB_UNSET_VAR"], "is not set"),
        (["ssh://someone@127.0.0.1:22", "--key-file", "/nonexistent/key"], "cannot read"),
    ],
)
def test_bad_arguments_are_clear_errors_that_save_nothing(args: list[str], says: str) -> None:
    with pytest.raises(CommandError, match=says):
        add_host("box", *args)
    assert_nothing_saved()


@pytest.mark.docker
def test_a_docker_engine_on_the_local_socket(settings) -> None:
    out = add_host("engine", "unix:///var/run/docker.sock", "--max-sandboxes", "3")
    host = Host.objects.get(name="engine")
    assert (host.kind, host.endpoint, host.credential) == (
        "docker",
        "unix:///var/run/docker.sock",
        None,
    )
    assert host.healthy and host.last_probe_at is not None and host.max_sandboxes == 3
    assert "added docker host engine" in out and "engine: Docker " in out
    assert AuditLog.objects.get(action="host.add").outcome == "ok"


def test_docker_tls_material_reaches_the_engine_client_as_it_reads_it(tmp_path: Path) -> None:
    """No TLS engine to hand: one on a closed port shows the material was accepted (a
    malformed credential would fail before any connection, with another message)."""
    files = []
    for name in ("ca", "cert", "key"):
        path = tmp_path / f"{name}.pem"
        path.write_text(f"-----BEGIN {name.upper()}-----\nnot-real-{name}\n")
        files += [f"--tls-{name}", str(path)]
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    with pytest.raises(CommandError) as refused:
        add_host("remote", f"tcp://127.0.0.1:{port}", *files)
    message = str(refused.value)
    assert message.startswith(f"tcp://127.0.0.1:{port} did not pass its probe: cannot reach the")
    assert message.endswith("nothing was saved") and "not-real" not in message
    assert_nothing_saved()


def test_only_platform_admins_read_keys_and_add_hosts(as_alice) -> None:
    with pytest.raises(PermissionDenied):
        services.read_host_key(as_alice, "ssh://someone@127.0.0.1:22")
    with pytest.raises(PermissionDenied):
        services.add_host(as_alice, "box", "unix:///var/run/docker.sock")
    assert_nothing_saved()
    outcomes = AuditLog.objects.order_by("pk").values_list("action", "outcome")
    assert list(outcomes) == [("host.key.read", "forbidden"), ("host.add", "forbidden")]
