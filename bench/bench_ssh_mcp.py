"""run_command `echo hi` through MCP over HTTP on a sandbox that lives on an SSH host, in one run.

    .venv/bin/python bench/bench_ssh_mcp.py [--runs 200] [--warmup 20] [--no-expect-isolated]

Starts a real OpenSSH sshd on loopback (tests/ssh/sshd.py, with the login user of
tests/ssh/logins.py that may `sudo -n`: each sandbox gets a Unix user of its own),
registers it as an SSH host on a throwaway SQLite database (key fetched and confirmed, probed,
as an admin does; the Docker host disabled), starts uvicorn on platform_site.asgi on a free
loopback port, creates one sandbox, and measures after a warm-up. Where the probe finds the
machine can isolate (issue 23: bubblewrap, slirp4netns, cgroups, a loop disk) the sandbox is
isolated and every command enters its namespaces; the run says which, and stops before
measuring when isolation was expected (the default) but not given:

1. MCP: a fastmcp.Client with an API key calls run_command `echo hi` --runs times: p50, p95;
2. raw: `echo hi` on a bare SshConnection (paramiko exec on its TCP_NODELAY socket, as the
   login user, outside any sandbox): what one SSH round trip costs on this machine;
3. service: sandboxes.services.run_command in this process (the agent over SSH, no HTTP);
4. MCP get_sandbox, which reaches no host: the floor MCP, HTTP and the database set.

Issue 11's target, and issue 23's for an isolated sandbox: MCP p50 <= 15 ms (the seed's
server takes ~55 ms for the same call).
Needs root (it starts sshd and creates users). sshd, the sandbox, uvicorn and the scratch
files are removed at the end, also after an error or Ctrl-C. Compare the ratios of one run,
not figures between days.
"""

from __future__ import annotations

import argparse
import asyncio
import fcntl
import logging
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from statistics import median
from typing import Any

from _setup import (
    ROOT,
    bench_instance,
    bench_principal,
    django_on_scratch_db,
    free_port,
    remove_scratch,
    start_web,
    stop_web,
    summary,
    timings,
)

TARGET_MS = 15.0
ECHO = "echo hi"


def start_sshd() -> Any:
    """The test sshd letting in the sudo login user (set up once per machine, kept)."""
    from tests.ssh.logins import ProvisionSshd, set_up_users
    from tests.ssh.sshd import STATE_DIR, ensure_test_user

    ensure_test_user()
    with open(STATE_DIR / "provision-lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # test runs may set the users up at the same time
        set_up_users()
    return ProvisionSshd().start()


def base_directory(user: str) -> Path:
    """A directory of this run's own, the login user's: provision makes the base in it."""
    path = Path(tempfile.mkdtemp(prefix="sandhub-bench-ssh-", dir="/var/tmp"))
    path.chmod(0o755)
    shutil.chown(path, user, user)
    return path


def register_host(server: Any, user: str, base_dir: Path) -> Any:
    """The sshd as an SSH host, pinned and probed; the only enabled host."""
    from hosts.models import Credential, Host
    from sandboxes import services
    from tenants.principal import Principal

    system = Principal.system()
    Host.objects.filter(kind=Host.Kind.DOCKER).update(enabled=False)
    credential = Credential(name="bench-ssh", kind=Credential.Kind.PRIVATE_KEY, username=user)
    credential.set_secret(server.client_keys["ed25519"].text)
    credential.save()
    host = Host.objects.create(name="bench-ssh", kind=Host.Kind.SSH, credential=credential,
                               endpoint=f"{server.address}:{server.port}",
                               base_dir=str(base_dir / "base"))  # fmt: skip
    seen = services.fetch_host_key(system, host.pk)
    services.confirm_host_key(system, host.pk, seen.fingerprint)
    if not services.probe_host(system, host.pk).healthy:
        raise SystemExit(f"the SSH host is not healthy: {Host.objects.get(pk=host.pk).last_error}")
    return host


async def ignore(message: Any) -> None:
    """The client's log handler: the streamed output is not shown (the default handler prints
    each notification, which would cost the client side, not the platform)."""


async def mcp_timings(
    url: str, key: str, sandbox_id: str, runs: int, warmup: int
) -> tuple[list[float], list[float]]:
    """run_command `echo hi`, then get_sandbox (no SSH at all: what MCP, HTTP and the
    database cost alone), each timed `runs` times after `warmup` calls."""
    from fastmcp import Client

    echo = {"sandbox_id": sandbox_id, "command": ECHO}
    async with Client(url, auth=key, log_handler=ignore) as client:

        async def timed(tool: str, args: dict[str, Any]) -> list[float]:
            seconds = []
            for index in range(warmup + runs):
                started = time.perf_counter()
                data = (await client.call_tool(tool, args)).data
                if index >= warmup:
                    seconds.append(time.perf_counter() - started)
                if tool == "run_command" and (data.exit_code, data.stdout) != (0, "hi\n"):
                    raise SystemExit(f"run_command gave {data}")
            return seconds

        echoes = await timed("run_command", echo)
        return echoes, await timed("get_sandbox", {"sandbox_id": sandbox_id})


def checked(call: Callable[[], Any]) -> Callable[[], None]:
    """call(), refusing any answer but `hi` (exit 0): a fast failure is not a figure."""

    def run() -> None:
        result = call()
        output = result.stdout if isinstance(result.stdout, str) else result.stdout.decode()
        if (result.exit_code, output) != (0, "hi\n"):
            raise SystemExit(f"{ECHO} gave {result}")

    return run


def isolation_line(host: Any, sandbox_id: str, expected: bool) -> str:
    """Whether the sandbox is isolated (its backend_state says), as one line; SystemExit when
    isolation was expected and not given (the host's probe says why not)."""
    from hosts.models import Host
    from sandboxes.models import Sandbox

    host = Host.objects.get(pk=host.pk)
    isolated = bool(Sandbox.objects.get(public_id=sandbox_id).backend_state.get("isolated"))
    if expected and not isolated:
        why = "; ".join(host.isolation_missing.splitlines()) or "the probe gave no reason"
        raise SystemExit(f"sandbox {sandbox_id} is NOT isolated (host.isolated={host.isolated}: "
                         f"{why}); --no-expect-isolated measures it anyway")  # fmt: skip
    if isolated:
        return "isolated: yes (bubblewrap namespaces, cgroups, loop disk; commands via nsenter)"
    return f"isolated: NO (host.isolated={host.isolated}; not expected: --no-expect-isolated)"


def measure(runs: int, warmup: int, action: Callable[[], None]) -> list[float]:
    timings(warmup, action)
    return timings(runs, action)


def remove_leftovers(base_dir: Path | None) -> None:
    """What a failed run left under its directory, removed as destroy removes it
    (tests/leftovers.py): processes, an isolated sandbox's cgroups, disk mount and egress
    rule, the sandbox users, files. rm -rf alone would leave mounts, cgroups and rules."""
    if base_dir is None:
        return
    from tests.leftovers import remove_sandboxes_under

    remove_sandboxes_under(base_dir)
    shutil.rmtree(base_dir, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    expect = "stop unless the sandbox is isolated (default: expect it)"
    parser.add_argument(
        "--expect-isolated", action=argparse.BooleanOptionalAction, default=True, help=expect
    )
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    bench_instance()  # before Django starts: the web process inherits it
    scratch = django_on_scratch_db()
    for chatty in ("httpx", "httpx2", "paramiko"):  # a line per request or connection
        logging.getLogger(chatty).setLevel(logging.WARNING)
    from hosts.backends import reset_backends
    from hosts.backends.ssh.connection import SshConnection
    from sandboxes import services
    from tenants import apikeys
    from tests.ssh.logins import SUDO_USER

    principal = bench_principal(channel="mcp")
    server = web = base_dir = sandbox_id = None
    try:
        server = start_sshd()
        base_dir = base_directory(SUDO_USER)
        host = register_host(server, SUDO_USER, base_dir)
        sandbox_id = services.create_sandbox(principal).id
        isolation = isolation_line(host, sandbox_id, args.expect_isolated)
        print(isolation, flush=True)
        key = apikeys.create_key(principal.user, principal.team, name="bench").plaintext
        port = free_port()
        web = start_web(port, log=scratch / "web.log")
        url = f"http://127.0.0.1:{port}/mcp/"
        mcp, bare_mcp = asyncio.run(mcp_timings(url, key, sandbox_id, args.runs, args.warmup))
        stop_web(web)
        with SshConnection(server.target(username=SUDO_USER)) as bare:
            raw = measure(args.runs, args.warmup, checked(lambda: bare.run(ECHO, timeout=10)))
        in_process = checked(lambda: services.run_command(principal, sandbox_id, ECHO))
        service = measure(args.runs, args.warmup, in_process)
    finally:
        if web is not None:
            stop_web(web)
        if sandbox_id is not None:
            try:
                services.delete_sandbox(principal, sandbox_id)
            except Exception as exc:  # what it left is removed below; the first error stands
                print(f"could not delete sandbox {sandbox_id}: {exc}", file=sys.stderr)
        reset_backends()  # this process's SSH connections and agents
        if server is not None:
            server.close()
        remove_leftovers(base_dir)
        remove_scratch(scratch)

    print(
        f"sandbox {sandbox_id} on SSH host {host.name} ({server.address}:{server.port}), "
        f"a Unix user of its own; {args.runs} calls each after {args.warmup} warm-up"
    )
    print(isolation)
    print(summary("MCP/HTTP run_command `echo hi` (round trip)", mcp))
    print(summary("MCP/HTTP get_sandbox (no SSH: the MCP floor)", bare_mcp))
    print(summary("raw paramiko exec `echo hi` (TCP_NODELAY)", raw))
    print(summary("service run_command `echo hi` (in process)", service))
    p50 = median(mcp) * 1000
    verdict = "met" if p50 <= TARGET_MS else "NOT met"
    print(
        f"target: MCP run_command p50 <= {TARGET_MS:g} ms: {p50:.1f} ms ({verdict}); "
        f"MCP / raw p50 {median(mcp) / median(raw):.1f}x, "
        f"MCP / service p50 {median(mcp) / median(service):.1f}x"
    )


if __name__ == "__main__":
    main()
