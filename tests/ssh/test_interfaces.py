"""SSH sandboxes through MCP and REST: a real OpenSSH sshd on loopback (tests/ssh/sshd.py), a live
uvicorn on the test database (tests/conftest.py), fastmcp.Client and HTTP with Bearer keys.

Each test registers its own hosts (key fetched and confirmed, probed, as an admin does) with
a base directory of its own, and disables them when it ends: create_sandbox lands on the one
host its test left enabled (the world's Docker host stays disabled).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
from django.db import connections
from fastmcp import Client

from hosts.models import Host
from sandboxes import services
from sandboxes.contract.errors import BackendFailure, NoCapacity
from sandboxes.models import CommandExecution, Sandbox
from tenants.models import AuditLog
from tenants.principal import Principal
from tests.live import World, in_thread, run
from tests.ssh.helpers import register
from tests.ssh.logins import PLAIN_USER, SUDO_USER, ProvisionSshd
from tests.ssh.sshd import Sshd, descendants

pytestmark = [
    pytest.mark.sshd,
    pytest.mark.filterwarnings("ignore:The logging capability is deprecated"),
]
SYSTEM = Principal.system()


# -- hosts -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ssh_world(world: World) -> World:
    Host.objects.filter(kind=Host.Kind.DOCKER).update(enabled=False)  # SSH hosts only
    return world


@pytest.fixture
def hosts(ssh_world: World) -> Iterator[Callable[..., Host]]:
    """register(), each host disabled again when the test ends."""
    made: list[Host] = []

    def make(sshd: Sshd, name: str, *args: Any, **kwargs: Any) -> Host:
        unique = f"{name}-{Host.objects.count()}"  # the database outlives the test
        made.append(register(sshd, unique, *args, **kwargs))
        return made[-1]

    yield make
    Host.objects.filter(pk__in=[h.pk for h in made]).update(enabled=False)


@pytest.fixture
def shared_host(hosts, server: Sshd, workdir: Path) -> Host:
    """Shared by every team; its login user may sudo: sandboxes get users of their own."""
    host = hosts(server, "ssh-shared", SUDO_USER, workdir / "base")
    assert host.per_sandbox_users and host.team is None
    return host


@pytest.fixture
def sandbox_of_a(shared_host: Host, ssh_world: World) -> Iterator[tuple[str, int]]:
    """Team A's sandbox on the shared host with a background job: (id, job id)."""
    alice = ssh_world.principal()
    sandbox_id = services.create_sandbox(alice).id
    try:
        job = services.start_background(alice, sandbox_id, "echo job")
        yield sandbox_id, job.id
    finally:
        services.delete_sandbox(alice, sandbox_id)


def state_of(sandbox_id: str) -> dict[str, Any]:
    return Sandbox.objects.get(public_id=sandbox_id).backend_state


def user_exists(name: str) -> bool:
    return subprocess.run(["getent", "passwd", name], capture_output=True).returncode == 0


def counts() -> tuple[int, int]:
    return Sandbox.objects.count(), CommandExecution.objects.count()


def untouched(sandbox_id: str, before: tuple[int, int]) -> None:
    """Nothing made or run, the sandbox as it was, nothing of team B's in its workspace."""
    assert counts() == before
    assert Sandbox.objects.get(public_id=sandbox_id).status == "running"
    assert not any(Path(state_of(sandbox_id)["dir"], "workspace").glob("b*"))


# -- MCP and REST ------------------------------------------------------------------------------


def mcp(server_url: str, key: str) -> Client:
    return Client(f"{server_url}/mcp/", auth=key)


async def mcp_until_ended(client: Client, args: dict) -> dict:
    deadline = time.monotonic() + 30
    while True:
        check = (await client.call_tool("check_background", args)).structured_content
        if not check["running"] or time.monotonic() > deadline:
            return check  # still running: the caller's assertion shows it
        await asyncio.sleep(0.2)


def rest(server_url: str, key: str) -> httpx.Client:
    auth = {"Authorization": f"Bearer {key}"}
    return httpx.Client(base_url=f"{server_url}/api/v1", headers=auth, timeout=60)


def rest_until_ended(client: httpx.Client, url: str) -> dict:
    deadline = time.monotonic() + 30
    while (check := client.get(url).json())["running"]:
        assert time.monotonic() < deadline, check
        time.sleep(0.2)
    return check


def test_an_ssh_sandbox_through_mcp(asgi_server, ssh_world, shared_host):
    files = [{"path": "proj/hello.txt", "content": "hello over ssh\n"}]
    script = "echo begin; sleep 2; echo end >&2; exit 4"

    async def conversation() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with mcp(asgi_server, ssh_world.keys["alice"]) as client:
            out["created"] = (await client.call_tool("create_sandbox", {})).structured_content
            sid = {"sandbox_id": out["created"]["id"]}
            try:
                out["state"] = await in_thread(state_of, sid["sandbox_id"])
                command = "echo out; echo err >&2; whoami; exit 3"
                call = client.call_tool
                out["ran"] = (await call("run_command", {**sid, "command": command})).data
                out["up"] = (await call("upload_files", {**sid, "files": files})).data
                # On the host: the workspace's directory (an isolated sandbox calls it /workspace).
                landed = Path(out["state"]["dir"], "workspace", "proj/hello.txt")
                out["on_disk"] = await asyncio.to_thread(landed.read_text)
                out["read"] = (await call("read_file", {**sid, "path": "proj/hello.txt"})).data
                job = (await call("start_background", {**sid, "command": script})).data
                task = {**sid, "task_id": job.task_id}
                out["running"] = (await call("check_background", task)).structured_content
                out["ended"] = await mcp_until_ended(client, task)
            finally:
                out["deleted"] = (await client.call_tool("delete_sandbox", sid)).data
        return out

    out = run(conversation())
    state, ran = out["state"], out["ran"]
    assert out["created"]["host"] == shared_host.name and out["created"]["status"] == "running"
    assert (ran.exit_code, ran.stdout, ran.stderr) == (3, f"out\n{state['user']}\n", "err\n")
    assert out["up"].paths == ["/workspace/proj/hello.txt"]
    assert out["on_disk"] == "hello over ssh\n"
    assert out["read"].content == "hello over ssh\n" and out["read"].eof
    assert out["running"]["running"] is True
    ended = out["ended"]
    assert (ended["status"], ended["exit_code"], ended["output"]) == ("failed", 4, "begin\nend\n")
    assert out["deleted"].status == "deleted"
    assert not os.path.lexists(state["dir"]) and not user_exists(state["user"])


def test_an_ssh_sandbox_through_rest(asgi_server, ssh_world, shared_host):
    payload = bytes(range(256)) * 64
    with rest(asgi_server, ssh_world.keys["alice"]) as client:
        created = client.post("/sandboxes/", json={"name": "over ssh"})
        assert created.status_code == 201, created.text
        sandbox_id = created.json()["id"]
        base = f"/sandboxes/{sandbox_id}"
        state = state_of(sandbox_id)
        try:
            assert created.json()["host"] == shared_host.name
            ran = client.post(f"{base}/commands/", json={"command": "echo out; whoami; exit 3"})
            assert ran.status_code == 201, ran.text
            assert (ran.json()["exit_code"], ran.json()["stdout"]) == (3, f"out\n{state['user']}\n")
            raw = {"Content-Type": "application/octet-stream"}
            put = client.post(f"{base}/files/?path=data/blob.bin", content=payload, headers=raw)
            assert put.status_code == 201 and put.json()["total_bytes"] == len(payload)
            got = client.get(f"{base}/files/download", params={"path": "data/blob.bin"})
            assert got.status_code == 200 and got.content == payload
            started = client.post(f"{base}/background/", json={"command": "echo bg; exit 5"})
            assert started.status_code == 202, started.text
            ended = rest_until_ended(client, f"{base}/background/{started.json()['id']}/")
            assert (ended["status"], ended["exit_code"], ended["output"]) == ("failed", 5, "bg\n")
        finally:
            deleted = client.delete(f"{base}/")
        assert deleted.status_code == 200 and deleted.json()["status"] == "deleted"
        assert client.get(f"{base}/").status_code == 404
    assert not os.path.lexists(state["dir"]) and not user_exists(state["user"])


# -- tenancy -----------------------------------------------------------------------------------


def test_team_b_gets_not_found_through_mcp(asgi_server, ssh_world, sandbox_of_a):
    sandbox_id, job_id = sandbox_of_a
    sid = {"sandbox_id": sandbox_id}
    calls = [
        ("get_sandbox", sid),
        ("run_command", {**sid, "command": "touch b-was-here"}),
        ("upload_files", {**sid, "files": [{"path": "b.txt", "content": "x"}]}),
        ("read_file", {**sid, "path": "b.txt"}),
        ("start_background", {**sid, "command": "sleep 100"}),
        ("check_background", {**sid, "task_id": job_id}),
        ("delete_sandbox", sid),
    ]
    before = counts()

    async def conversation() -> dict[str, str]:
        errors = {}
        async with mcp(asgi_server, ssh_world.keys["bob"]) as client:
            for name, args in calls:
                result = await client.call_tool(name, args, raise_on_error=False)
                errors[name] = result.content[0].text if result.is_error else "no error"
        return errors

    for name, message in run(conversation()).items():
        assert message == f"sandbox {sandbox_id} not found", (name, message)
    untouched(sandbox_id, before)


def test_team_b_gets_not_found_through_rest(asgi_server, ssh_world, sandbox_of_a):
    sandbox_id, job_id = sandbox_of_a
    base = f"/sandboxes/{sandbox_id}"
    raw = {"content": b"x", "headers": {"Content-Type": "application/octet-stream"}}
    requests = [
        ("get", f"{base}/", {}),
        ("post", f"{base}/commands/", {"json": {"command": "touch b-was-here"}}),
        ("post", f"{base}/files/?path=b.txt", raw),
        ("get", f"{base}/files/download", {"params": {"path": "b.txt"}}),
        ("post", f"{base}/background/", {"json": {"command": "sleep 100"}}),
        ("get", f"{base}/background/{job_id}/", {}),
        ("delete", f"{base}/", {}),
        ("get", f"/commands/{job_id}/", {}),
    ]
    before = counts()
    with rest(asgi_server, ssh_world.keys["bob"]) as client:
        for method, url, kwargs in requests:
            response = client.request(method.upper(), url, **kwargs)
            assert response.status_code == 404, (method, url, response.text)
            assert "not found" in response.json()["detail"], (method, url)
    untouched(sandbox_id, before)


# -- sshd killed mid-command -------------------------------------------------------------------


def argv_of(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""  # exited meanwhile


def sleeping(sshd: Sshd) -> bool:
    """Whether `sleep 30` runs under this sshd (the command really started on the host)."""
    assert sshd.process is not None
    return any(argv_of(pid) == b"sleep\x0030\x00" for pid in descendants(sshd.process.pid))


def run_in_thread(outcome: dict[str, Any], principal: Principal, sandbox_id: str) -> None:
    try:
        outcome["result"] = services.run_command(principal, sandbox_id, "sleep 30", timeout=120)
    except Exception as exc:
        outcome["error"] = exc
    finally:
        connections.close_all()  # this thread's own


def host_rows(host: Host, action: str) -> int:
    rows = AuditLog.objects.filter(target_type="host", target_id=str(host.pk))
    return rows.filter(action=action).count()


def test_sshd_killed_mid_command_errors_then_the_host_comes_back(ssh_world, hosts, workdir):
    own = ProvisionSshd().start()  # killed below: not the module's server
    alice = ssh_world.principal()
    sandbox_id = ""
    try:
        host = hosts(own, "ssh-killed", SUDO_USER, workdir / "base")
        sandbox_id = services.create_sandbox(alice).id
        first = services.run_command(alice, sandbox_id, "echo kept > kept.txt; echo before")
        assert first.stdout == "before\n"
        outcome: dict[str, Any] = {}
        thread = threading.Thread(target=run_in_thread, args=(outcome, alice, sandbox_id))
        thread.start()
        deadline = time.monotonic() + 15
        while not sleeping(own):
            assert time.monotonic() < deadline, "`sleep 30` did not start on the host"
            time.sleep(0.02)
        killed_at = time.monotonic()
        own.kill()  # returns once sshd and everything under it are gone
        thread.join(timeout=30)
        took = time.monotonic() - killed_at
        assert not thread.is_alive() and took < 5, f"the command ended {took:.1f} s after"
        print(f"\ncommand ended as error {took * 1000:.0f} ms after sshd was killed")

        error, lost = outcome.get("error"), f"the connection to {own.address}:{own.port} was lost"
        assert isinstance(error, BackendFailure), outcome
        assert error.message.startswith(f"command could not run in sandbox {sandbox_id}: {lost}")
        row = CommandExecution.objects.get(sandbox__public_id=sandbox_id, command="sleep 30")
        assert row.status == "error" and row.finished_at is not None, row.status
        assert row.error_message.startswith(lost) and row.exit_code is None
        assert Sandbox.objects.get(public_id=sandbox_id).status == "running"

        (down,) = [h for h in services.probe_all_hosts(SYSTEM) if h.name == host.name]
        assert not down.healthy and f"{own.address}:{own.port}" in down.last_error
        assert host_rows(host, "host.down") == 1
        with pytest.raises(NoCapacity):
            services.create_sandbox(alice)  # the one enabled host is down

        own.start()  # same port, same keys
        assert services.probe_host(SYSTEM, host.pk).healthy
        assert host_rows(host, "host.up") == 1
        after = services.run_command(alice, sandbox_id, "cat kept.txt; echo after")
        assert (after.exit_code, after.stdout) == (0, "kept\nafter\n")
        history = [(c.command, c.status) for c in services.list_commands(alice, sandbox_id)]
        assert history == [("cat kept.txt; echo after", "succeeded"), ("sleep 30", "error"),
                           ("echo kept > kept.txt; echo before", "succeeded")]  # fmt: skip
    finally:
        if own.process is None:
            own.start()  # a failure above left it down: the sandbox can still be removed
        if sandbox_id:
            services.delete_sandbox(alice, sandbox_id)
        own.close()


# -- a host without per-sandbox users ----------------------------------------------------------


def test_a_host_without_per_sandbox_users_serves_only_the_team_it_is_private_to(
    asgi_server, ssh_world, hosts, server, workdir
):
    host = hosts(server, "ssh-plain", PLAIN_USER, workdir / "plain", team=ssh_world.team_a)
    assert host.host_key_pinned == server.fingerprint and host.per_sandbox_users is False

    async def as_alice() -> tuple[dict, Any]:
        async with mcp(asgi_server, ssh_world.keys["alice"]) as client:
            created = (await client.call_tool("create_sandbox", {})).structured_content
            sid = {"sandbox_id": created["id"]}
            try:
                ran = await client.call_tool("run_command", {**sid, "command": "whoami"})
            finally:
                await client.call_tool("delete_sandbox", sid)
        return created, ran.data

    async def as_bob() -> tuple[list[str], str]:
        async with mcp(asgi_server, ssh_world.keys["bob"]) as client:
            listed = (await client.call_tool("list_hosts", {})).structured_content
            refused = await client.call_tool("create_sandbox", {}, raise_on_error=False)
        assert refused.is_error
        return [h["name"] for h in listed["hosts"]], refused.content[0].text

    created, ran = run(as_alice())
    assert created["host"] == host.name and (ran.exit_code, ran.stdout) == (0, PLAIN_USER + "\n")
    before = counts()
    names, refusal = run(as_bob())
    assert host.name not in names
    assert refusal.startswith("no host has room for a new sandbox"), refusal
    with rest(asgi_server, ssh_world.keys["bob"]) as client:
        response = client.post("/sandboxes/", json={})
    assert response.status_code == 503 and response.json()["code"] == "no_capacity"
    # Shared with every team, it still serves no one: its sandboxes would share one Unix user.
    Host.objects.filter(pk=host.pk).update(team=None)
    for key in ("bob", "alice"):
        with rest(asgi_server, ssh_world.keys[key]) as client:
            assert client.post("/sandboxes/", json={}).status_code == 503, key
    assert counts() == before
