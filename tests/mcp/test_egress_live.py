"""The egress policy end to end as an agent meets it: a real fastmcp.Client over HTTP, the real
Docker engine, the platform's own proxy process (services.egress_proxy(), what `manage.py
egressproxy` runs) over the database, in a thread of this test.

Upstream servers listen on docker0's address (this machine's; the sandbox cannot reach them
but through the proxy), the proxy's name map (SANDHUB_EGRESS_HOSTS) sends the test's names
there. Team A allows two names; a secret is bound to one of them. From the sandbox:

- the allowed name answers, another name is refused and the refusal shows in
  get_network_log and get_sandbox;
- the secret reaches its server, while the sandbox only ever holds its placeholder
  (environment, /proc, the trust bundle, the answers), and the value typed into a command is
  masked in its result, its history row and the audit log.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import threading
import uuid
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from egress.ca import CertificateAuthority, generate_ca
from egress.thread import ProxyThread
from sandboxes import services
from sandboxes.models import CommandExecution
from tenants.models import AuditLog
from tests.egress.servers import Recorder, Upstream
from tests.live import in_thread, mcp, run

pytestmark = pytest.mark.filterwarnings("ignore:The logging capability is deprecated")

VALUE = f"sk-live-{uuid.uuid4().hex}"

# argv: url, [header value]. Through HTTP_PROXY (the sandbox's environment); prints the
# status and body, or the error.
GET = """
import sys, urllib.error, urllib.request
request = urllib.request.Request(sys.argv[1])
if len(sys.argv) > 2:
    request.add_header("Authorization", sys.argv[2])
try:
    with urllib.request.urlopen(request, timeout=20) as answer:
        print(answer.status, answer.read().decode())
except urllib.error.HTTPError as exc:
    print(exc.code, exc.read().decode(errors="replace"))
except Exception as exc:
    print("failed", type(exc).__name__, exc)
"""


class OnBridge(Upstream):
    """tests/egress/servers.Upstream on docker0's address, a port of the kernel's choosing."""

    def __init__(self, name: str, address: str, context: Any = None) -> None:
        ThreadingHTTPServer.__init__(self, (address, 0), Recorder)
        self.name, self.context = name, context
        self.requests = []
        self.cut_short = threading.Event()


def docker0_address() -> str:
    output = subprocess.run(
        ["ip", "-4", "-o", "addr", "show", "docker0"], capture_output=True, text=True, check=True
    ).stdout
    return output.split()[3].split("/")[0]


def serve(server: Upstream) -> threading.Thread:
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    return thread


@pytest.fixture
def egress(settings, world, tmp_path: Path) -> Iterator[tuple[OnBridge, OnBridge, ProxyThread]]:
    """The servers, the platform's proxy on its ports, team A's policy and a bound secret."""
    address = docker0_address()
    upstream_cert, upstream_key = generate_ca("Upstream test CA")
    (tmp_path / "upstream.pem").write_text(upstream_cert)
    settings.SANDHUB_EGRESS_UPSTREAM_CA = str(tmp_path / "upstream.pem")
    settings.SANDHUB_EGRESS_HOSTS = {n: address for n in ("open.test", "api.test", "shut.test")}
    plain = OnBridge("open.test", address)
    secure = OnBridge(
        "api.test",
        address,
        CertificateAuthority(upstream_cert, upstream_key).server_context("api.test"),
    )
    threads = [serve(plain), serve(secure)]
    proxy = ProxyThread(services.egress_proxy()).start()
    settings.SANDHUB_EGRESS_PORT, settings.SANDHUB_EGRESS_DNS_PORT = proxy.port, proxy.dns_port
    team = world.team_a
    team.allow_network = True
    team.egress_allowlist = [f"open.test:{plain.server_port}", f"api.test:{secure.server_port}"]
    team.save()
    services.add_secret(world.principal(), name="API_TOKEN", hosts=["api.test"], value=VALUE)
    try:
        yield plain, secure, proxy
    finally:
        proxy.stop()
        for server, thread in zip((plain, secure), threads, strict=True):
            server.shutdown()
            server.server_close()
            thread.join(5)


def call(server: str, key: str, tool: str, args: dict) -> dict:
    async def conversation() -> dict:
        async with mcp(server, key) as client:
            answer = await client.call_tool(tool, args, raise_on_error=False)
            text = "\n".join(getattr(part, "text", "") for part in answer.content)
            assert not answer.is_error, text
            return answer.structured_content or json.loads(text)

    return run(conversation())


def command(server: str, key: str, sandbox_id: str, line: str) -> str:
    result = call(server, key, "run_command", {"sandbox_id": sandbox_id, "command": line})
    assert result["exit_code"] == 0, result
    return result["stdout"].strip()


def test_an_agent_reaches_its_allow_list_with_its_secret_that_never_enters(
    asgi_server, world, egress
) -> None:
    plain, secure, proxy = egress
    key = world.keys["alice"]
    made = call(asgi_server, key, "create_sandbox", {"network": "allowlist", "memory_mb": 256})
    sandbox_id = made["id"]
    assert made["network_mode"] == "allowlist"
    try:
        get = f"python3 -c {shlex.quote(GET)}"
        open_url = f"http://open.test:{plain.server_port}/build"
        assert (
            command(asgi_server, key, sandbox_id, f"{get} {open_url}") == "200 hello from open.test"
        )
        assert plain.requests[-1][0] == "/build"

        shut_url = f"http://shut.test:{plain.server_port}/"
        refused = command(asgi_server, key, sandbox_id, f"{get} {shut_url}")
        assert refused.startswith("403 ") and "shut.test" in refused

        # HTTPS to the bound name: the proxy intercepts it (the sandbox trusts the deployment
        # CA) and puts the value where the sandbox has only its placeholder.
        api_url = f"https://api.test:{secure.server_port}/v1/models"
        answer = command(asgi_server, key, sandbox_id, f'{get} {api_url} "Bearer $API_TOKEN"')
        assert answer == "200 hello from api.test"
        assert secure.requests[-1][1]["Authorization"] == f"Bearer {VALUE}"

        # Nowhere inside: not in any process's environment, nor in any file it can read of
        # the platform's (the trust bundle), nor in the proxy's answers above.
        looked = command(
            asgi_server,
            key,
            sandbox_id,
            "cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n'; cat /etc/sandhub/* ; env",
        )
        assert "API_TOKEN=sandhub-secret-" in looked and VALUE not in looked

        # Typed into a command, the value is masked in the result, the history and the audit.
        echoed = command(asgi_server, key, sandbox_id, f"echo {VALUE}")
        assert echoed == "[secret API_TOKEN]"
        rows = CommandExecution.objects.filter(sandbox__public_id=sandbox_id)
        assert rows.count() >= 5
        for row in rows:
            assert VALUE not in row.command + row.stdout + row.stderr
        assert not [a for a in AuditLog.objects.all() if VALUE in json.dumps(a.details)]

        proxy.report_now()
        log = call(asgi_server, key, "get_network_log", {"sandbox_id": sandbox_id})
        destinations = {(r["destination"], r["reason"]) for r in log["refused"]}
        assert (f"shut.test:{plain.server_port}", "not_allowed") in destinations, log
        shown = call(asgi_server, world.keys["victor"], "get_sandbox", {"sandbox_id": sandbox_id})
        assert shown["egress"]["refused"][0]["destination"] == f"shut.test:{plain.server_port}"
    finally:
        run(in_thread(services.delete_sandbox, world.principal(), sandbox_id))
