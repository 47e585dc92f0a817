"""run_tests in a directory without tests (real Docker engine with pytest in the image): the
run's outcome is no_tests with a hint naming the command and directory, through the service,
MCP (a real fastmcp.Client over streamable HTTP) and REST; a real failing suite still says
failed."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from sandboxes import services
from sandboxes.contract.results import UploadFile
from tests.live import TEST_CALC, mcp, run

pytestmark = [
    pytest.mark.docker,
    pytest.mark.filterwarnings("ignore:The logging capability is deprecated"),
]
EMPTY = "/workspace/no-tests-here"


@pytest.fixture(scope="module")
def empty_dir(world, shared_sandbox):
    services.run_command(world.principal(), shared_sandbox, f"mkdir -p {EMPTY}")
    return EMPTY


def test_the_service_says_no_tests_were_collected(world, shared_sandbox, empty_dir):
    report = services.run_tests(world.principal(), shared_sandbox, cwd=empty_dir)
    assert report.result.exit_code == 5 and report.total == 0
    assert report.outcome == "no_tests"
    assert f"`python3 -m pytest -q` ran in {empty_dir}" in report.hint
    assert "test_*.py" in report.hint


def test_a_failing_suite_is_still_failed(world, shared_sandbox):
    principal = world.principal()
    files = [
        UploadFile(path="/workspace/suite/calc.py", content=b"def add(a, b):\n    return a + b\n"),
        UploadFile(path="/workspace/suite/test_calc.py", content=TEST_CALC.encode()),
    ]
    services.upload_files(principal, shared_sandbox, files)
    report = services.run_tests(principal, shared_sandbox, cwd="/workspace/suite")
    assert (report.outcome, report.hint, report.failed, report.passed) == ("failed", "", 1, 2)


def test_mcp_and_rest_show_the_outcome_and_hint(asgi_server, world, shared_sandbox, empty_dir):
    async def conversation():
        async with mcp(asgi_server, world.keys["alice"]) as client:
            args = {"sandbox_id": shared_sandbox, "cwd": empty_dir}
            return (await client.call_tool("run_tests", args)).structured_content

    report = run(conversation())
    assert report["outcome"] == "no_tests" and empty_dir in report["hint"], report
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {world.keys['alice']}")
    url = f"/api/v1/sandboxes/{shared_sandbox}/run-tests/"
    response = client.post(url, {"cwd": empty_dir}, format="json")
    assert response.status_code in (200, 201), response.content
    body = response.json()
    assert body["outcome"] == "no_tests" and empty_dir in body["hint"], body
