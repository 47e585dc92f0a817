"""What an MCP client shows when the endpoint refuses a request before any tool runs: a body
over the 4 MiB limit (413) and a missing or refused API key (401). Both are JSON-RPC errors a
real fastmcp.Client surfaces as their message (not "Server returned an error response"),
saying what to do; a refused key's message never tells a stranger whether a key prefix
exists. A live uvicorn serving platform_site.asgi; the real Docker engine behind the tools."""

from __future__ import annotations

import base64
import json
import os
import socket

import httpx2 as httpx
import pytest

from mcp_bridge.args import MAX_INLINE_CHARS
from mcp_bridge.auth import NO_KEY, NOT_A_KEY, REFUSED_KEY
from mcp_bridge.bodylimit import LIMIT_BYTES, TOO_LARGE
from sandboxes.models import Sandbox
from tests.live import mcp, run

pytestmark = [
    pytest.mark.docker,
    pytest.mark.filterwarnings("ignore:The logging capability is deprecated"),
]

HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def _surfaced(coroutine) -> str:
    """The text the fastmcp client raises for a refused conversation."""
    with pytest.raises(Exception) as raised:  # noqa: PT011 - the text is what is checked
        run(coroutine)
    return str(raised.value)


def test_an_oversized_call_is_refused_with_the_limit_and_what_to_do(
    asgi_server, world, shared_sandbox
):
    async def conversation():
        async with mcp(asgi_server, world.keys["alice"]) as client:
            await client.call_tool(
                "write_file",
                {"sandbox_id": shared_sandbox, "path": "big.txt", "content": "x" * (5 * 2**20)},
            )

    said = _surfaced(conversation())
    assert TOO_LARGE in said, said
    assert "error response" not in said
    assert "4 MiB" in said and "sandhub cp" in said and "upload_files" in said


def test_the_schemas_limit_is_true_a_file_at_it_gets_through(asgi_server, world, shared_sandbox):
    """The largest content the schema allows, text or base64, fits in one request."""
    binary = os.urandom(MAX_INLINE_CHARS // 4 * 3)
    encoded = base64.b64encode(binary).decode()
    assert len(encoded) == MAX_INLINE_CHARS

    async def conversation():
        async with mcp(asgi_server, world.keys["alice"]) as client:
            tools = {tool.name: tool for tool in await client.list_tools()}
            content = tools["write_file"].input_schema["properties"]["content"]
            text = await client.call_tool(
                "write_file",
                {
                    "sandbox_id": shared_sandbox,
                    "path": "max.txt",
                    "content": "y" * MAX_INLINE_CHARS,
                },
            )
            blob = await client.call_tool(
                "write_file",
                {
                    "sandbox_id": shared_sandbox,
                    "path": "max.bin",
                    "content": encoded,
                    "encoding": "base64",
                },
            )
            return content, text, blob

    content, text, blob = run(conversation())
    assert content["maxLength"] == MAX_INLINE_CHARS < LIMIT_BYTES
    assert "4 MiB" in content["description"] and "3 MB" in content["description"]
    assert text.structured_content["total_bytes"] == MAX_INLINE_CHARS
    assert blob.structured_content["total_bytes"] == len(binary)


def test_a_declared_oversized_body_is_answered_unread_with_the_request_id(asgi_server, world):
    host, port = asgi_server.removeprefix("http://").split(":")
    head = b'{"jsonrpc": "2.0", "id": 41, "method": "tools/call", "params": {"name": "x"'
    request = (
        f"POST /mcp/ HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        "Accept: application/json, text/event-stream\r\n"
        f"Authorization: Bearer {world.keys['alice']}\r\n"
        f"Content-Length: {10**10}\r\n\r\n"
    ).encode() + head
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(request)
        answer = b""
        while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
    status, _, body = answer.partition(b"\r\n\r\n")
    assert status.startswith(b"HTTP/1.1 413"), status
    error = json.loads(body)
    assert error == {
        "jsonrpc": "2.0",
        "id": 41,
        "error": {"code": -32600, "message": TOO_LARGE, "data": {"limit_bytes": LIMIT_BYTES}},
    }


def test_a_streamed_oversized_body_names_its_request_id(asgi_server, world):
    """No Content-Length (chunked): the SDK counts the bytes and refuses past the limit; the
    answer carries the id read from the body's first bytes, and nothing ran."""
    before = Sandbox.objects.count()
    params = json.dumps({"name": "create_sandbox", "arguments": {"name": "z" * (5 * 2**20)}})
    body = '{"jsonrpc": "2.0", "id": "call-7", "method": "tools/call", "params": ' + params + "}"

    def chunks():
        data = body.encode()
        for start in range(0, len(data), 256 * 1024):
            yield data[start : start + 256 * 1024]

    headers = HEADERS | {"Authorization": f"Bearer {world.keys['alice']}"}
    response = httpx.post(f"{asgi_server}/mcp/", content=chunks(), headers=headers, timeout=60)
    assert response.status_code == 413
    assert response.json()["id"] == "call-7"
    assert response.json()["error"]["message"] == TOO_LARGE
    assert Sandbox.objects.count() == before


@pytest.mark.parametrize(
    ("authorization", "expected"),
    [
        (None, NO_KEY),
        ("Basic YWxpY2U6c2VjcmV0", NO_KEY),
        ("Bearer not-a-key", NOT_A_KEY),
        ("Bearer shk_aaaaaaaa_" + "x" * 43, REFUSED_KEY),  # no such prefix
        ("expired", REFUSED_KEY),
        ("revoked", REFUSED_KEY),
        ("wrong-secret", REFUSED_KEY),  # an existing prefix: the same words as none
    ],
)
def test_a_refused_key_says_why_without_telling_which_prefixes_exist(
    asgi_server, world, authorization, expected
):
    if authorization in ("expired", "revoked"):
        authorization = f"Bearer {world.keys[authorization]}"
    elif authorization == "wrong-secret":
        authorization = f"Bearer shk_{world.rows['alice'].prefix}_" + "w" * 43
    headers = HEADERS | ({"Authorization": authorization} if authorization else {})
    body = {"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {}}
    response = httpx.post(f"{asgi_server}/mcp/", json=body, headers=headers)
    assert response.status_code == 401
    assert response.json()["error"]["message"] == expected
    challenge = response.headers["www-authenticate"]
    assert challenge.startswith("Bearer ")
    assert f'error_description="{expected}"' in challenge
    assert ('error="invalid_token"' in challenge) == (expected != NO_KEY)
    assert "re-register" not in response.text + challenge
    assert "/keys/" in expected and "manage.py create_api_key" in expected


def test_the_client_shows_the_refused_keys_message(asgi_server, world):
    async def conversation():
        async with mcp(asgi_server, world.keys["revoked"]) as client:
            await client.list_tools()

    said = _surfaced(conversation())
    assert REFUSED_KEY in said, said
