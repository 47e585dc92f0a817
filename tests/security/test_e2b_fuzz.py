"""The E2B endpoints fuzzed: no input makes them fail (live server, real Docker engine).

The control API from its own OpenAPI document (/e2b/openapi.json; schemathesis, seeded and
bounded as tests/security/test_schema_fuzz.py is), with a member's key, on a team with room
for two sandboxes; then every envd RPC with generated bodies (bytes, and valid messages with
generated fields) and a valid access token for a real sandbox. The property: never a server
error, and envd's answers are Connect's (a known error code, or a message).
"""

from __future__ import annotations

import contextlib
import json
import struct
from collections.abc import Iterator
from typing import Any

import httpx2 as httpx
import pytest
import requests
import schemathesis
from django.test import override_settings
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from e2b_compat import envd, openapi
from e2b_compat.auth import envd_token
from e2b_compat.connect import CODE_STATUS
from sandboxes import services
from sandboxes.models import Sandbox
from tests.engine import engine_cleaning_up
from tests.security.test_e2b_tenancy import RPCS, STREAMS

pytestmark = pytest.mark.docker

INSTANCE = "security-e2b-fuzz"
SEED = 20_261_128


@pytest.fixture(scope="module")
def target(world, asgi_server) -> Iterator[dict[str, Any]]:
    with override_settings(SANDHUB_INSTANCE=INSTANCE), engine_cleaning_up(INSTANCE):
        world.team_a.max_running_sandboxes = 2
        world.team_a.save(update_fields=["max_running_sandboxes"])
        member = world.principal(world.dave)
        sandbox_id = services.create_sandbox(member, memory_mb=256).id
        services.write_file(member, sandbox_id, "a.txt", "a\n")
        try:
            yield {
                "url": asgi_server,
                "sandbox_id": sandbox_id,
                "key": world.keys["dave"],
                "token": envd_token(world.rows["dave"], sandbox_id),
            }
        finally:
            for sandbox in Sandbox.objects.filter(team=world.team_a).exclude(status="deleted"):
                with contextlib.suppress(Exception):  # gone meanwhile: nothing to clean
                    services.delete_sandbox(member, sandbox.public_id)


@pytest.fixture(scope="module")
def control_schema(target):
    config = schemathesis.Config.from_dict(
        {
            "seed": SEED,
            "headers": {"X-API-Key": target["key"]},
            "request-timeout": 120,
            "base-url": f"{target['url']}/e2b",
            "generation": {
                "mode": "all",
                "max-examples": 8,
                "deterministic": True,
                "no-shrink": True,
                "database": "none",
                "with-security-parameters": False,
            },
            "phases": {
                "examples": {"enabled": True},
                "coverage": {"enabled": True, "unexpected-methods": ["PUT", "PATCH"]},
                "fuzzing": {"enabled": True},
                "stateful": {"enabled": False},
            },
            "parameters": {"path.sandbox_id": target["sandbox_id"]},
            # Deleting the one sandbox would leave the rest nothing to act on: its refusals
            # (another id) are fuzzed, the real one is not killed.
            "operations": [
                {
                    "include-method": "DELETE",
                    "include-path": "/sandboxes/{sandbox_id}",
                    "enabled": False,
                },  # fmt: skip
            ],
        }
    )
    return schemathesis.openapi.from_dict(openapi.DOCUMENT, config=config)


@pytest.fixture(autouse=True)
def node_id_for_schemathesis(request) -> None:
    if not hasattr(request.node, "_nodeid"):
        request.node._nodeid = request.node.nodeid  # as test_schema_fuzz.py says why


schema = schemathesis.pytest.from_fixture("control_schema")


@schema.parametrize()
def test_no_control_input_makes_the_server_fail(case) -> None:
    with requests.Session() as session:
        response = case.call(session=session)
    assert response.status_code < 500, f"{response.status_code}: {case.as_curl_command()}"


def call(target: dict[str, Any], key: tuple[str, str], body: bytes) -> httpx.Response:
    streaming = key in STREAMS
    return httpx.post(
        f"{target['url']}/e2b/envd/{key[0]}/{key[1]}",
        content=body,
        headers={
            "Content-Type": "application/connect+proto" if streaming else "application/proto",
            "E2b-Sandbox-Id": target["sandbox_id"],
            "X-Access-Token": target["token"],
            "Connect-Timeout-Ms": "5000",
        },
        timeout=60,
    )


def assert_connect_answer(key: tuple[str, str], response: httpx.Response) -> None:
    assert response.status_code < 500 or response.status_code in (501, 503), response.text
    if key in STREAMS and response.status_code == 200:
        body, at = response.content, 0
        while at < len(body):
            flags, size = struct.unpack_from(">BI", body, at)
            if flags & 0x02:
                error = json.loads(body[at + 5 : at + 5 + size]).get("error")
                assert error is None or error["code"] in CODE_STATUS, error
            at += 5 + size
    elif response.status_code != 200:
        assert response.json()["code"] in CODE_STATUS, response.text


def envelope(data: bytes) -> bytes:
    return struct.pack(">BI", 0, len(data)) + data


NOT_STREAMED = sorted(k for k in envd.ROUTES if k not in STREAMS or k[1] == "Connect")


@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    key=st.sampled_from(NOT_STREAMED),
    noise=st.binary(max_size=256),
    wrap=st.booleans(),
)
def test_no_envd_bytes_make_the_server_fail(target, key, noise, wrap) -> None:
    # Start and WatchDir would run or wait: their bytes are fuzzed as envelopes around noise
    # only when they cannot parse as a request (below); Connect waits at most 5 s.
    body = envelope(noise) if (key in STREAMS) == wrap else noise
    assert_connect_answer(key, call(target, key, body))


def test_hostile_envelopes_are_refused(target) -> None:
    for key in RPCS:
        if key not in STREAMS:
            continue
        cut, huge = b"\x00\x00\x00", b"\x00\xff\xff\xff\xff" + b"x" * 10
        not_gzip = b"\x01\x00\x00\x00\x03abc"
        for body in (cut, huge, not_gzip):
            assert_connect_answer(key, call(target, key, body))
