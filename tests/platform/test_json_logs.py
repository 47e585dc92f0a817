"""SANDHUB_LOG_FORMAT=json (platform_site/logformat.py): every line the web process
(scripts/web.sh: uvicorn, Django, the MCP endpoint), the worker (manage.py qcluster) and the
egress proxy (manage.py egressproxy) log is one JSON object with time, level, logger, message
and process; a line logged while an MCP request is served carries its MCP session."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import httpx2 as httpx
import pytest

from tests.live import free_port, mcp, run, subprocess_env
from tests.mcp.webfleet import start_web
from tests.qcluster import QCluster

ROOT = Path(__file__).resolve().parents[2]
FIELDS = {"time", "level", "logger", "message", "process"}
JSON_LOGS = {"SANDHUB_LOG_FORMAT": "json"}


def json_lines(text: str, skip: tuple[str, ...] = ()) -> list[dict]:
    """Every line of a log as JSON (failing on the first that is not), but those that
    begin with one of `skip` (a shell script's own echo, not a log line)."""
    lines = []
    for line in text.splitlines():
        if not line.strip() or line.startswith(skip):
            continue
        parsed = json.loads(line)  # a text line fails the test here
        assert parsed.keys() >= FIELDS, parsed
        datetime.fromisoformat(parsed["time"])
        lines.append(parsed)
    assert lines, "nothing was logged"
    return lines


def test_the_web_process_logs_json_with_the_mcp_session(world, tmp_path: Path):
    log = tmp_path / "web.log"
    web = start_web(free_port(), log, **JSON_LOGS)
    try:
        httpx.get(f"{web.url}/no-such-page/", timeout=10)

        async def conversation():
            async with mcp(web.url, world.keys["alice"], mode="legacy") as client:
                await client.call_tool("list_sandboxes", {})
                return client.transport.get_session_id()

        session = run(conversation())
    finally:
        web.stop()
    lines = json_lines(log.read_text(), skip=("web on http://",))
    loggers = {line["logger"] for line in lines}
    assert {"uvicorn.error", "uvicorn.access", "django.request"} <= loggers, loggers
    assert any("/no-such-page/" in line["message"] for line in lines)
    served = [line for line in lines if line.get("mcp_session") == session]
    assert any("POST /mcp/" in line["message"] for line in served), served
    assert {line["process"] for line in lines} == {web.process.pid}


def test_with_workers_the_supervisor_logs_json_too_given_uvicorns_log_config(
    live_db, tmp_path: Path
):
    """With more than one worker, uvicorn's supervisor never loads Django: its own lines
    (started, stopping, worker restarts) follow UVICORN_LOG_CONFIG (platform_site/
    uvicorn_log_json.json, the same formatter)."""
    log = tmp_path / "web.log"
    config = "platform_site/uvicorn_log_json.json"
    web = start_web(free_port(), log, workers=2, UVICORN_LOG_CONFIG=config, **JSON_LOGS)
    web.stop()
    lines = json_lines(log.read_text(), skip=("web on http://",))
    messages = [line["message"] for line in lines if line["process"] == web.process.pid]
    assert any("Started parent process" in message for message in messages), messages
    assert any("Stopping parent process" in message for message in messages), messages
    assert len({line["process"] for line in lines}) == 3  # the supervisor and two workers


def test_the_worker_logs_json(live_db, tmp_path: Path):
    cluster = QCluster(tmp_path / "qcluster.log", env=JSON_LOGS)
    cluster.start()
    cluster.stop()
    lines = json_lines(cluster.log())
    assert any(line["logger"] == "django-q" and "running" in line["message"] for line in lines)


def test_the_egress_proxy_logs_json(live_db, tmp_path: Path):
    log = tmp_path / "egress.log"
    env = subprocess_env(
        SANDHUB_EGRESS_BIND="127.0.0.1",
        SANDHUB_EGRESS_PORT=str(free_port()),
        SANDHUB_EGRESS_DNS_PORT=str(free_port()),
        **JSON_LOGS,
    )
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, "manage.py", "egressproxy"],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 60
        while "egress proxy on" not in log.read_text():
            assert process.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(30)
    lines = json_lines(log.read_text())
    assert any("egress proxy on 127.0.0.1" in line["message"] for line in lines)


@pytest.mark.parametrize("value", ["xml", "JSONL"])
def test_an_unknown_log_format_stops_the_process_with_a_message(value: str):
    env = subprocess_env(SANDHUB_LOG_FORMAT=value)
    done = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode != 0
    assert "SANDHUB_LOG_FORMAT must be one of text, json" in done.stderr
