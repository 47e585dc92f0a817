"""/metrics on the live web process (issue 28): off without a token, 401 without the right
one, and what it counts moving with real requests and real MCP calls (a fastmcp client over
HTTP); then scripts/web.sh with two uvicorn workers sharing PROMETHEUS_MULTIPROC_DIR, whose
scrapes sum both workers' counts and give the database's figures once."""

from __future__ import annotations

import os
import re
import secrets
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2 as httpx
import pytest
from fastmcp.exceptions import ToolError

from hosts.models import Host, Image
from sandboxes.models import Sandbox
from tests.live import mcp, run
from tests.platform.metrics_helpers import samples, value
from tests.webprocess import WebProcess

TOKEN = secrets.token_hex(24)


@pytest.fixture
def token(settings) -> str:
    settings.SANDHUB_METRICS_TOKEN = TOKEN
    return TOKEN


def scraped(server: str) -> dict:
    answer = httpx.get(f"{server}/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert answer.status_code == 200, answer.text
    return samples(answer.text)


def test_off_without_a_token(settings, asgi_server, world):
    settings.SANDHUB_METRICS_TOKEN = ""
    answer = httpx.get(f"{asgi_server}/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert answer.status_code == 404
    assert "sandhub_" not in answer.text


@pytest.mark.parametrize(
    "authorization",
    [None, "", "Bearer", f"Bearer {TOKEN[:-1]}", f"Bearer {TOKEN}x", f"Basic {TOKEN}", TOKEN],
)
def test_refused_without_the_right_token(token, asgi_server, world, authorization):
    headers = {} if authorization is None else {"Authorization": authorization}
    answer = httpx.get(f"{asgi_server}/metrics", headers=headers)
    assert answer.status_code == 401
    assert answer.headers["www-authenticate"] == 'Bearer realm="metrics"'
    assert "sandhub_" not in answer.text


def test_only_get(token, asgi_server, world):
    answer = httpx.post(f"{asgi_server}/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert answer.status_code == 405
    assert "sandhub_" not in answer.text


def test_http_requests_are_counted_by_group_and_status(token, asgi_server, world):
    before = scraped(asgi_server)
    assert httpx.get(f"{asgi_server}/login/").status_code == 200
    assert httpx.get(f"{asgi_server}/api/v1/sandboxes/").status_code in (401, 403)
    assert httpx.get(f"{asgi_server}/admin/").status_code == 302
    assert httpx.get(f"{asgi_server}/no-such-page/").status_code == 404
    after = scraped(asgi_server)

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    requests = "sandhub_http_requests_total"
    assert moved(requests, method="read", route="pages", status="2xx") == 1
    assert moved(requests, method="read", route="api", status="4xx") == 1
    assert moved(requests, method="read", route="admin", status="3xx") == 1
    assert moved(requests, method="read", route="pages", status="4xx") == 1
    assert moved(requests, method="read", route="metrics", status="2xx") == 1  # `before`'s
    assert moved("sandhub_http_request_duration_seconds_count", route="pages") == 2


def test_mcp_calls_are_counted_by_tool_and_outcome(token, asgi_server, world):
    async def converse() -> None:
        async with mcp(asgi_server, world.keys["alice"]) as client:
            await client.call_tool("list_sandboxes", {})
            with pytest.raises(ToolError):  # a sandbox that does not exist: the tool says so
                await client.call_tool("get_sandbox", {"sandbox_id": "sb_0000nothing00"})
            with pytest.raises(ToolError):  # arguments that fail validation
                await client.call_tool("get_sandbox", {"sandbox_id": 12})
            with pytest.raises(ToolError):  # a client's made-up name: no series of its own
                await client.call_tool(f"made_up_{secrets.token_hex(4)}", {})
        async with mcp(asgi_server, world.keys["alice_read"]) as client:
            with pytest.raises(ToolError):  # a read-only key may not create
                await client.call_tool("create_sandbox", {})

    before = scraped(asgi_server)
    run(converse())
    after = scraped(asgi_server)

    def moved(tool: str, outcome: str) -> float:
        name = "sandhub_mcp_tool_calls_total"
        return value(after, name, tool=tool, outcome=outcome) - value(
            before, name, tool=tool, outcome=outcome
        )

    assert moved("list_sandboxes", "ok") == 1
    assert moved("get_sandbox", "tool_error") == 1
    assert moved("get_sandbox", "refused") == 1
    assert moved("unknown", "refused") == 1
    assert moved("create_sandbox", "refused") == 1
    tools = {dict(labels).get("tool") for (name, labels) in after if name.startswith("sandhub_mcp")}
    assert not any(tool.startswith("made_up_") for tool in tools if tool)
    calls = value(after, "sandhub_mcp_tool_call_duration_seconds_count", tool="list_sandboxes")
    assert (
        calls - value(before, "sandhub_mcp_tool_call_duration_seconds_count", tool="list_sandboxes")
        == 1
    )
    mcp_posts = "sandhub_http_requests_total", {"method": "write", "route": "mcp", "status": "2xx"}
    assert value(after, mcp_posts[0], **mcp_posts[1]) > value(before, mcp_posts[0], **mcp_posts[1])


# --- two uvicorn workers, one metrics directory -----------------------------------------------


class TwoWorkers(WebProcess):
    """scripts/web.sh with two uvicorn workers sharing one metrics directory. Ready once its
    port accepts (no request: a page request would count in the totals the test checks) and
    both workers have started."""

    def worker_pids(self) -> list[int]:
        """The worker processes as uvicorn logs them ("Started server process [PID]"): the
        parent has other children too (multiprocessing's resource tracker)."""
        assert self.process is not None
        parent = self.process.pid
        started = re.findall(r"Started server process \[(\d+)\]", self.log())
        alive = Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
        return [int(pid) for pid in started if pid in alive]

    def wait_for_startups(self, count: int) -> None:
        """Until `count` workers have started (uvicorn logs each one's startup)."""
        deadline = time.monotonic() + 90
        while self.log().count("Application startup complete") < count:
            if not self.alive or time.monotonic() > deadline:
                raise RuntimeError(f"scripts/web.sh, two workers:\n{self.log_tail()}")
            time.sleep(0.1)


@pytest.fixture
def two_workers(world, tmp_path) -> Iterator[TwoWorkers]:
    (tmp_path / "metrics").mkdir()
    env = {"SANDHUB_METRICS_TOKEN": TOKEN, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "metrics")}
    web = TwoWorkers(tmp_path / "web.log", workers=2, env=env, ready_path=None)
    try:
        web.start()
        web.wait_for_startups(2)
        yield web
    finally:
        web.stop(timeout=20)


def test_two_workers_scrapes_sum_their_counts(two_workers, tmp_path, world):
    """And a worker killed with kill -9 takes none of its counts with it: its files stay, the
    worker uvicorn starts in its place adds to them."""
    server = two_workers.url
    host, image = Host.objects.get(name="local"), Image.objects.get(name="python")
    for _ in range(3):  # rows only: the gauges read the database
        Sandbox.objects.create(
            team=world.team_a,
            host=host,
            image=image,
            status="running",
            cpus=1,
            memory_mb=256,
            pids_limit=64,
        )
    requests = 40
    for _ in range(requests):  # a connection each: either worker may take it
        assert httpx.get(f"{server}/login/").status_code == 200
    writers = {path.name for path in (tmp_path / "metrics").glob("counter_*.db")}
    for _ in range(6):  # whichever worker answers tells the same totals
        found = scraped(server)
        pages = value(
            found, "sandhub_http_requests_total", method="read", route="pages", status="2xx"
        )
        assert pages == requests
        assert value(found, "sandhub_sandboxes", status="running", host="local") == 3
    print(f"counter files of {len(writers)} worker process(es): {sorted(writers)}")
    assert writers

    workers = two_workers.worker_pids()
    assert len(workers) == 2
    os.kill(workers[0], signal.SIGKILL)
    two_workers.wait_for_startups(3)  # the replacement
    assert httpx.get(f"{server}/login/").status_code == 200
    pages = {"method": "read", "route": "pages", "status": "2xx"}
    assert value(scraped(server), "sandhub_http_requests_total", **pages) == requests + 1
