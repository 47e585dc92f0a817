"""envd's streams on the wire (raw Connect over HTTP, as E2B's SDKs send it): keep-alive
events of each stream's own type while nothing else comes, and a client that goes away
leaving its process running, as envd does."""

from __future__ import annotations

import struct
import time

import httpx2 as httpx
import pytest

from e2b_compat.auth import envd_token
from e2b_compat.proto import filesystem_pb2 as fs
from e2b_compat.proto import process_pb2 as pb

pytestmark = pytest.mark.docker


def frames(body: bytes) -> list[tuple[int, bytes]]:
    found, at = [], 0
    while at < len(body):
        flags, size = struct.unpack_from(">BI", body, at)
        found.append((flags, body[at + 5 : at + 5 + size]))
        at += 5 + size
    return found


def stream_request(asgi_server, sbx, world, rpc: str, message) -> dict:
    """The parts of a streaming call's request: its URL, envelope and headers."""
    data = message.SerializeToString()
    return {
        "url": f"{asgi_server}/e2b/envd/{rpc}",
        "content": struct.pack(">BI", 0, len(data)) + data,
        "headers": {
            "Content-Type": "application/connect+proto",
            "E2b-Sandbox-Id": sbx.sandbox_id,
            "X-Access-Token": envd_token(world.rows["alice"], sbx.sandbox_id),
            "Keepalive-Ping-Interval": "1",
        },
    }


def stream(asgi_server, sbx, world, rpc: str, message, **options):
    return httpx.post(**stream_request(asgi_server, sbx, world, rpc, message), **options)


def test_a_quiet_command_gets_keepalives_of_its_own_type(asgi_server, sbx, world) -> None:
    start = pb.StartRequest(
        process=pb.ProcessConfig(cmd="/bin/bash", args=["-l", "-c", "sleep 2.5; echo up"])
    )
    answer = stream(asgi_server, sbx, world, "process.Process/Start", start, timeout=30)
    events = [pb.StartResponse.FromString(d).event for f, d in frames(answer.content) if not f & 2]
    kinds = [e.WhichOneof("event") for e in events]
    assert kinds[0] == "start" and kinds[-1] == "end" and kinds.count("keepalive") >= 2, kinds
    assert events[-1].end.exit_code == 0 and b"up\n" in b"".join(e.data.stdout for e in events)


def test_a_watch_gets_keepalives_of_its_own_type(asgi_server, sbx, world) -> None:
    sbx.files.make_dir("quiet")
    watch = fs.WatchDirRequest(path="quiet")
    with httpx.Client(timeout=30) as client:
        parts = stream_request(asgi_server, sbx, world, "filesystem.Filesystem/WatchDir", watch)
        request = client.build_request("POST", **parts)
        response = client.send(request, stream=True)
        body, began = b"", time.monotonic()
        for chunk in response.iter_bytes():
            body += chunk
            if time.monotonic() - began > 2.5:
                break
        response.close()  # the client goes: the watch ends with it
    kinds = [fs.WatchDirResponse.FromString(d).WhichOneof("event") for f, d in frames(body)]
    assert kinds[0] == "start" and kinds.count("keepalive") >= 1, kinds


def test_a_process_outlives_the_client_that_started_it(asgi_server, sbx, world) -> None:
    start = pb.StartRequest(
        process=pb.ProcessConfig(
            cmd="/bin/bash", args=["-l", "-c", "sleep 2; echo late > late.txt"]
        )
    )
    with pytest.raises(httpx.ReadTimeout):  # the client gives up after its first events
        stream(asgi_server, sbx, world, "process.Process/Start", start, timeout=0.5)
    deadline = time.monotonic() + 15
    while not sbx.files.exists("late.txt"):
        assert time.monotonic() < deadline, "the process died with its stream"
        time.sleep(0.3)
    assert sbx.files.read("late.txt") == "late\n"
