"""The E2B endpoints as a hostile tenant tries them (live server, real Docker engine).

Every control API route and every envd RPC (from e2b_compat.urls and envd.ROUTES, so a new
one without a case here fails), with team A's key on team B's sandbox, answers exactly as
for a made-up id; envd refuses a token for another sandbox, a forged one, and a revoked
key's; a viewer's key and a read-only key change nothing. After all of it team B's sandbox
runs as before, with no command of team A's in its history.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Iterator

import httpx2 as httpx
import pytest
from django.urls import URLPattern

from e2b_compat import envd, urls
from e2b_compat.auth import envd_token
from e2b_compat.proto import filesystem_pb2 as fs
from e2b_compat.proto import process_pb2 as pb
from sandboxes import services
from sandboxes.models import CommandExecution, Sandbox
from tenants import apikeys
from tenants.principal import Principal

pytestmark = pytest.mark.docker

GHOST = "sb_0000ghost000"
# Each control route (its path pattern) and the methods tried on it, with a body.
CONTROL = {
    "sandboxes/<str:sandbox_id>": [("GET", None), ("DELETE", None)],
    "sandboxes/<str:sandbox_id>/timeout": [("POST", {"timeout": 60})],
    "sandboxes/<str:sandbox_id>/pause": [("POST", {})],
    "sandboxes/<str:sandbox_id>/resume": [("POST", {"timeout": 60})],
    "sandboxes/<str:sandbox_id>/connect": [("POST", {"timeout": 60})],
    "v2/sandboxes/<str:sandbox_id>/connect": [("POST", {"timeout": 60})],
}
NO_ID = {
    "sandboxes",
    "v2/sandboxes",
    "openapi.json",
    "envd/health",
    "envd/files",
    "envd/<str:service>/<str:method>",
}
# Each envd RPC and a request that would act if it got through.
RPCS = {
    ("process.Process", "Start"): pb.StartRequest(
        process=pb.ProcessConfig(cmd="/bin/bash", args=["-l", "-c", "touch /workspace/pwned"])
    ),
    ("process.Process", "Connect"): pb.ConnectRequest(process=pb.ProcessSelector(pid=1)),
    ("process.Process", "List"): pb.ListRequest(),
    ("process.Process", "SendSignal"): pb.SendSignalRequest(
        process=pb.ProcessSelector(pid=1), signal=pb.SIGNAL_SIGKILL
    ),
    ("process.Process", "SendInput"): pb.SendInputRequest(process=pb.ProcessSelector(pid=1)),
    ("process.Process", "CloseStdin"): pb.CloseStdinRequest(process=pb.ProcessSelector(pid=1)),
    ("process.Process", "Update"): pb.UpdateRequest(process=pb.ProcessSelector(pid=1)),
    ("filesystem.Filesystem", "Stat"): fs.StatRequest(path="/workspace"),
    ("filesystem.Filesystem", "ListDir"): fs.ListDirRequest(path="/workspace"),
    ("filesystem.Filesystem", "MakeDir"): fs.MakeDirRequest(path="/workspace/pwned"),
    ("filesystem.Filesystem", "Move"): fs.MoveRequest(source="/workspace/b", destination="x"),
    ("filesystem.Filesystem", "Remove"): fs.RemoveRequest(path="/workspace/b.txt"),
    ("filesystem.Filesystem", "WatchDir"): fs.WatchDirRequest(path="/workspace"),
    ("filesystem.Filesystem", "CreateWatcher"): fs.CreateWatcherRequest(path="/workspace"),
    ("filesystem.Filesystem", "GetWatcherEvents"): fs.GetWatcherEventsRequest(watcher_id="w"),
    ("filesystem.Filesystem", "RemoveWatcher"): fs.RemoveWatcherRequest(watcher_id="w"),
}
STREAMS = {key for key, (_, _, streaming) in envd.ROUTES.items() if streaming}


def test_every_route_has_a_case() -> None:
    patterns = {str(p.pattern) for p in urls.urlpatterns if isinstance(p, URLPattern)}
    assert patterns == set(CONTROL) | NO_ID
    assert set(envd.ROUTES) == set(RPCS)


@pytest.fixture(scope="module")
def scene(world, asgi_server) -> Iterator[dict]:
    """Team B's sandbox with a file, team A's own sandbox, and A's keys of every kind."""
    bob = Principal(user=world.bob, team=world.team_b, channel="web")
    b_sandbox = services.create_sandbox(bob).id
    services.write_file(bob, b_sandbox, "b.txt", "team B's\n")
    alice = world.principal()
    a_sandbox = services.create_sandbox(alice).id
    viewer_key = apikeys.create_key(world.victor, world.team_a, name="v", scopes="read,write")
    yield {
        "url": asgi_server,
        "b": b_sandbox,
        "a": a_sandbox,
        "owner": world.keys["alice"],
        "owner_key": world.rows["alice"],
        "read_only": world.keys["alice_read"],
        "viewer": viewer_key.plaintext,
        "b_commands": CommandExecution.objects.filter(sandbox__public_id=b_sandbox).count(),
    }
    services.delete_sandbox(bob, b_sandbox)
    services.delete_sandbox(alice, a_sandbox)


def control(scene: dict, method: str, path: str, body: object, key: str) -> httpx.Response:
    return httpx.request(
        method, f"{scene['url']}/e2b/{path}", json=body, headers={"X-API-Key": key}, timeout=60
    )


def envelope(message) -> bytes:
    data = message.SerializeToString()
    return struct.pack(">BI", 0, len(data)) + data


def rpc(scene: dict, key: tuple[str, str], sandbox_id: str, token: str) -> tuple[int, str]:
    """(HTTP status, Connect code) of one envd call."""
    message = RPCS[key]
    streaming = key in STREAMS
    response = httpx.post(
        f"{scene['url']}/e2b/envd/{key[0]}/{key[1]}",
        content=envelope(message) if streaming else message.SerializeToString(),
        headers={
            "Content-Type": "application/connect+proto" if streaming else "application/proto",
            "E2b-Sandbox-Id": sandbox_id,
            "X-Access-Token": token,
        },
        timeout=60,
    )
    if not streaming:
        return response.status_code, response.json().get("code", "") if response.content else ""
    body = response.content
    flags, size = struct.unpack_from(">BI", body, 0)
    assert flags & 0x02, f"{key}: the stream gave an event before refusing: {body[:80]!r}"
    return response.status_code, json.loads(body[5 : 5 + size]).get("error", {}).get("code", "")


def same_but_id(one: str, other: str, ids: tuple[str, str]) -> bool:
    return one.replace(ids[0], "<id>") == other.replace(ids[1], "<id>")


def test_control_routes_answer_for_team_b_as_for_a_made_up_id(scene) -> None:
    for pattern, tries in CONTROL.items():
        for method, body in tries:
            answers = []
            for target in (scene["b"], GHOST):
                path = re.sub(r"<str:sandbox_id>", target, pattern)
                response = control(scene, method, path, body, scene["owner"])
                answers.append((response.status_code, response.text))
            (b_status, b_text), (ghost_status, ghost_text) = answers
            assert b_status == ghost_status == 404, (pattern, method, answers)
            assert same_but_id(b_text, ghost_text, (scene["b"], GHOST)), (pattern, answers)
    assert Sandbox.objects.get(public_id=scene["b"]).status == "running"


def test_envd_refuses_another_sandbox_forged_and_revoked_tokens(scene, world) -> None:
    own = envd_token(scene["owner_key"], scene["a"])
    forged = own[:-4] + ("AAAA" if not own.endswith("AAAA") else "BBBB")
    revoked_token = envd_token(world.rows["revoked"], scene["b"])
    for key in RPCS:
        for sandbox_id, token in (
            (scene["b"], own),  # A's token, B's sandbox
            (GHOST, own),
            (scene["a"], forged),
            (scene["a"], revoked_token),
            (scene["a"], ""),
        ):
            status, code = rpc(scene, key, sandbox_id, token)
            assert code == "unauthenticated", (key, sandbox_id, status, code)
    files = httpx.get(
        f"{scene['url']}/e2b/envd/files",
        params={"path": "b.txt"},
        headers={"E2b-Sandbox-Id": scene["b"], "X-Access-Token": own},
    )
    assert files.status_code == 401 and "team B" not in files.text
    for sandbox_id in (scene["b"], GHOST):  # health tells nothing of another team's sandbox
        health = httpx.get(
            f"{scene['url']}/e2b/envd/health",
            headers={"E2b-Sandbox-Id": sandbox_id, "X-Access-Token": own},
        )
        assert health.status_code == 401, health.text


def test_team_b_is_as_it_was(scene) -> None:
    after = CommandExecution.objects.filter(sandbox__public_id=scene["b"])
    assert after.count() == scene["b_commands"]
    assert not after.exclude(actor__username="bob").exists()


def test_a_viewer_and_a_read_only_key_change_nothing(scene) -> None:
    for key in (scene["viewer"], scene["read_only"]):
        created = control(scene, "POST", "v2/sandboxes", {"templateID": "base"}, key)
        assert created.status_code == 403, created.text
        killed = control(scene, "DELETE", f"sandboxes/{scene['a']}", None, key)
        assert killed.status_code == 403, killed.text
    viewer_row = apikeys.authenticate(scene["viewer"])
    token = envd_token(viewer_row, scene["a"])
    for key in [("process.Process", "Start"), ("filesystem.Filesystem", "MakeDir")]:
        status, code = rpc(scene, key, scene["a"], token)
        assert code == "permission_denied", (key, status, code)
