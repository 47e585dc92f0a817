"""sandhub.mcp_resilience's HTTP transport on its own (no server): a connection failure is a
502 carrying a JSON-RPC error, a body cut off mid-way a StreamError, anything else as it was.
The whole story against real web processes: tests/mcp/test_lost_connection.py."""

from __future__ import annotations

import asyncio
import json

import httpx2 as httpx
import pytest
from sandhub.mcp_resilience import CONNECTION_LOST, AnswerLost, ConnectionLossAsAnswer

URL = "http://127.0.0.1:9/mcp/"


class CutOff(httpx.AsyncByteStream):
    async def __aiter__(self):
        yield b'{"jsonrpc": "2.0", '
        raise httpx.ReadError("connection reset by peer")


def fetch(handler) -> tuple[httpx.Response, bytes | Exception]:
    """The response to a POST through the transport, and its body or what reading it raised
    (streamed, as the MCP SDK reads its answers)."""

    async def go():
        transport = ConnectionLossAsAnswer(httpx.MockTransport(handler))
        async with (
            httpx.AsyncClient(transport=transport) as client,
            client.stream("POST", URL, json={}) as response,
        ):
            try:
                return response, await response.aread()
            except Exception as exc:
                return response, exc

    return asyncio.run(go())


def test_a_connection_failure_is_a_502_with_a_json_rpc_error():
    def refused(request):
        raise httpx.ConnectError("connection refused")

    response, body = fetch(refused)
    assert response.status_code == 502
    assert response.headers["content-type"] == "application/json"
    error = json.loads(body)["error"]
    assert error["code"] == CONNECTION_LOST
    assert "connection to the MCP server was lost" in error["message"]
    assert "ConnectError: connection refused" in error["message"]


def test_a_body_cut_off_is_a_stream_error_of_that_response():
    response, outcome = fetch(lambda request: httpx.Response(200, stream=CutOff()))
    assert response.status_code == 200
    assert isinstance(outcome, AnswerLost)
    assert isinstance(outcome, httpx.StreamError)  # what the SDK fails one call for


@pytest.mark.parametrize("status", [200, 404])
def test_answers_pass_unchanged(status: int):
    response, body = fetch(lambda request: httpx.Response(status, json={"ok": status}))
    assert response.status_code == status
    assert json.loads(body) == {"ok": status}
