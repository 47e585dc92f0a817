"""E2B's SDK against MCP, on the same sandbox in the same run (issue 29's target: E2B's
`commands.run("echo hi")` p50 at most 1.5 x MCP `run_command`'s).

    .venv/bin/python bench/bench_e2b.py [--runs 200]

uvicorn (platform_site.asgi, one process) on a throwaway SQLite database, the local Docker
engine, one sandbox made through E2B's SDK. Then, alternating call by call so both see the
same machine: `Sandbox.commands.run("echo hi")` with E2B's own Python SDK (HTTP/1.1, its
documented self-hosted configuration) and `run_command("echo hi")` with a fastmcp client in
its own MCP session; and, as the raw baseline, `docker exec echo hi` in the same container.
Prints the percentiles and the ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import statistics
import threading
import time

from _setup import (
    ROOT,
    bench_principal,
    django_on_scratch_db,
    free_port,
    percentile,
    remove_scratch,
    start_web,
    stop_web,
)


def line(label: str, seconds: list[float]) -> str:
    return (
        f"{label:<34} p50 {statistics.median(seconds) * 1000:7.1f} ms   "
        f"p90 {percentile(seconds, 90) * 1000:7.1f} ms   n={len(seconds)}"
    )


class McpCaller:
    """A fastmcp client in a loop of its own (a thread), called synchronously."""

    def __init__(self, url: str, key: str) -> None:
        from fastmcp import Client
        from fastmcp.client.transports import StreamableHttpTransport

        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        self.client = Client(StreamableHttpTransport(f"{url}/mcp/", auth=key))
        self._await(self.client.__aenter__())

    def _await(self, work):
        return asyncio.run_coroutine_threadsafe(work, self.loop).result(120)

    def run(self, sandbox_id: str, command: str) -> dict:
        arguments = {"sandbox_id": sandbox_id, "command": command}
        result = self._await(self.client.call_tool("run_command", arguments))
        return result.structured_content or {}

    def close(self) -> None:
        self._await(self.client.__aexit__(None, None, None))
        self.loop.call_soon_threadsafe(self.loop.stop)


def main() -> None:
    for name in ("httpx", "httpx2"):  # a line per request otherwise
        logging.getLogger(name).setLevel(logging.WARNING)
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=200)
    runs = parser.parse_args().runs
    scratch = django_on_scratch_db()
    from tenants import apikeys

    principal = bench_principal()
    key = apikeys.create_key(principal.user, principal.team, name="bench", scopes="read,write")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = start_web(port, log=scratch / "web.log")
    os.environ.update(
        E2B_API_URL=f"{url}/e2b",
        E2B_SANDBOX_URL=f"{url}/e2b/envd",
        E2B_API_KEY=key.plaintext,
        E2B_HTTP_VERSION="1.1",
        E2B_DOMAIN="sandhub.invalid",
    )
    from e2b import Sandbox

    sandbox = None
    mcp = None
    try:
        sandbox = Sandbox.create(timeout=1800)
        mcp = McpCaller(url, key.plaintext)
        container = _container(sandbox.sandbox_id)
        for _ in range(5):  # warm-up: connections, the agent, the page cache
            sandbox.commands.run("echo hi")
            mcp.run(sandbox.sandbox_id, "echo hi")
            container.exec_run(["echo", "hi"])
        e2b, via_mcp, raw = [], [], []
        for _ in range(runs):
            began = time.perf_counter()
            assert sandbox.commands.run("echo hi").stdout == "hi\n"
            e2b.append(time.perf_counter() - began)
            began = time.perf_counter()
            assert mcp.run(sandbox.sandbox_id, "echo hi").get("stdout") == "hi\n"
            via_mcp.append(time.perf_counter() - began)
            began = time.perf_counter()
            container.exec_run(["echo", "hi"])
            raw.append(time.perf_counter() - began)
        print(line('E2B SDK commands.run("echo hi")', e2b))
        print(line('MCP run_command("echo hi")', via_mcp))
        print(line("raw: docker exec echo hi", raw))
        ratio = statistics.median(e2b) / statistics.median(via_mcp)
        print(f"E2B / MCP p50 ratio: {ratio:.2f} (target <= 1.5)")
        over_raw = statistics.median(e2b) / statistics.median(raw)
        print(f"E2B / raw docker exec p50 ratio: {over_raw:.2f}")
    finally:
        if mcp is not None:
            mcp.close()
        if sandbox is not None:
            sandbox.kill()
        stop_web(server)
        remove_scratch(scratch)


def _container(sandbox_id: str):
    import docker
    from django.conf import settings

    client = docker.DockerClient(base_url=settings.SANDHUB_DOCKER_URL)
    return client.containers.get(f"sandhub-{sandbox_id}")


if __name__ == "__main__":
    os.chdir(ROOT)
    main()
