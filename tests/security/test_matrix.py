"""The tenancy matrix: every REST route and every MCP tool, tried by every role of team A and
by a read-only key with team B's ids, must answer "not found" and change nothing.

The routes come from Django's URL resolver (sandboxes/api/urls.py) and the tools from a real
MCP client's list_tools() against the live server, so a new one without a case here fails.
For each case the answer to a foreign id is compared with the answer to a made-up id: the two
must be the same (ids cannot be probed). After each, the rows of Sandbox, CommandExecution,
ApiKey (but its last-use columns), Membership and AccessLink, and team B's and team A's
sandboxes on the engine (files, processes, status), must be as before. Routes and tools that
name no id act in the key's team whatever they are told (?team=beta) and show nothing of team
B. Then every write route and tool, with a viewer's or a read-only key on team A's own
sandbox: refused.

All of it on the in-memory backend, and the cases with ids again on the real Docker engine
(so "nothing changed" covers real containers); creations only on the in-memory backend.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import httpx2 as httpx
import pytest
from django.urls import URLPattern, get_resolver, reverse
from fastmcp import Client

from tests.live import run
from tests.security import matrix, matrix_egress, matrix_files, matrix_snapshots, matrix_terminals
from tests.security.matrix import A_SB, ACTORS, B_CMD, B_JOB, B_LINK, B_SB, engines_named
from tests.security.matrix_tools import (
    REFUSED_WRITERS,
    text_of,
    tool_active,
    tool_creates,
    tool_hosts,
    tool_listed,
)

pytestmark = pytest.mark.filterwarnings("ignore:The logging capability is deprecated")

PWN = "touch /workspace/pwned"


# --- REST ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RestCase:
    variants: list[dict[str, Any]] = field(default_factory=list)  # url kwargs; [] = no ids
    json: Any = None
    raw: bytes | None = None
    query: dict[str, Any] = field(default_factory=dict)
    scoped: Callable[..., None] | None = None  # routes without ids: what the answer must show


def rest_routes() -> dict[tuple[str, str], bool]:
    """(route name, method) -> whether it takes ids, for every route the resolver knows.
    OPTIONS (DRF's metadata, no service call) is left out."""
    found = {}
    for pattern in get_resolver("sandboxes.api.urls").url_patterns:
        assert isinstance(pattern, URLPattern), f"an included URLconf: walk it too ({pattern})"
        view = getattr(pattern.callback, "view_class")  # noqa: B009 - a DRF view's class
        for method in ("get", "post", "put", "patch", "delete"):
            if hasattr(view, method):
                found[(str(pattern.name), method.upper())] = bool(pattern.pattern.converters)
    return found


def listed_in_team_a(scene, actor, response, created) -> None:
    assert response.status_code == 200, response.text
    listed = {s["id"] for s in response.json()["results"]}
    assert listed and listed <= scene.team_a_ids()


def hosts_count_team_a(scene, actor, response, created) -> None:
    assert response.status_code == 200, response.text
    counts = [host["sandboxes_running"] for host in response.json()["results"]]
    assert counts == [scene.team_a_live()], "a host's count must be the team's own"


def creates_in_team_a(status: int) -> Callable[..., None]:
    def check(scene, actor, response, created) -> None:
        if actor in REFUSED_WRITERS:
            assert response.status_code == 403, response.text
            assert REFUSED_WRITERS[actor] in response.json()["detail"]
            assert created() == []
            return
        assert response.status_code == status, response.text
        made = created()
        assert made and set(made) <= scene.team_a_ids(), made

    return check


SANDBOX_B = [{"sandbox_id": B_SB}]
SECRET_PATHS = {"path": "/workspace", "paths": ["secret.txt"]}
JOB_B = [{"sandbox_id": B_SB, "command_id": B_JOB}, {"sandbox_id": A_SB, "command_id": B_JOB}]
LINK_B = [{"sandbox_id": B_SB, "link_id": B_LINK}, {"sandbox_id": A_SB, "link_id": B_LINK}]
REST_CASES: dict[tuple[str, str], RestCase] = {
    ("sandboxes", "GET"): RestCase(scoped=listed_in_team_a),
    ("sandboxes", "POST"): RestCase(json={"name": "where?"}, scoped=creates_in_team_a(201)),
    ("sandbox", "GET"): RestCase(SANDBOX_B),
    ("sandbox", "DELETE"): RestCase(SANDBOX_B),
    ("commands", "GET"): RestCase(SANDBOX_B),
    ("commands", "POST"): RestCase(SANDBOX_B, json={"command": PWN}),
    ("background", "POST"): RestCase(SANDBOX_B, json={"command": PWN}),
    ("background-command", "GET"): RestCase(JOB_B, query={"tail_lines": 5}),
    ("background-cancel", "POST"): RestCase(JOB_B),
    ("run-tests", "POST"): RestCase(SANDBOX_B, json={}),
    ("files", "GET"): RestCase(SANDBOX_B, query={"path": "/workspace"}),
    ("files", "POST"): RestCase(SANDBOX_B, raw=b"pwned", query={"path": "pwned.txt"}),
    ("download", "GET"): RestCase(SANDBOX_B, query={"path": "secret.txt"}),
    ("command", "GET"): RestCase([{"command_id": B_CMD}, {"command_id": B_JOB}]),
    ("run-once", "POST"): RestCase(json={"command": "true"}, scoped=creates_in_team_a(200)),
    ("hosts", "GET"): RestCase(scoped=hosts_count_team_a),
    ("previews", "GET"): RestCase(SANDBOX_B),
    ("previews", "POST"): RestCase(SANDBOX_B, json={"port": 8000}),
    ("preview", "DELETE"): RestCase([{"sandbox_id": B_SB, "port": 8000}]),
    ("deploy", "POST"): RestCase(SANDBOX_B, json={"command": PWN, "port": 8000}),
    ("links", "GET"): RestCase(SANDBOX_B),
    ("links", "POST"): RestCase(SANDBOX_B, json={"path": "secret.txt"}),
    ("link", "DELETE"): RestCase(LINK_B),
    ("manifest", "GET"): RestCase(SANDBOX_B, query={"path": "/workspace"}),
    ("metrics", "GET"): RestCase(SANDBOX_B, query={"live": "true"}),
    ("sync", "POST"): RestCase(SANDBOX_B, raw=matrix.pwned_tar(), query={"path": "/workspace"}),
    ("sync-delete", "POST"): RestCase(SANDBOX_B, json=SECRET_PATHS),
    ("sync-download", "POST"): RestCase(SANDBOX_B, json=SECRET_PATHS),
    **{(name, "POST"): RestCase(SANDBOX_B) for name in ("pause", "resume", "stop")},
}
REST_CASES.update(matrix_snapshots.rest_cases(RestCase))  # snapshots' routes
REST_CASES.update(matrix_files.rest_cases(RestCase))  # delete, rename, new folder
REST_CASES.update(matrix_terminals.rest_cases(RestCase))  # terminals' and sessions' routes
REST_CASES.update(matrix_egress.rest_cases(RestCase))  # network log, team policy, secrets
ROUTES = rest_routes()
FAKE, DOCKER = ["fake"], [pytest.param("docker", marks=pytest.mark.docker)]
BACKENDS = FAKE + DOCKER
EVERY_ROUTE = [(route, actor) for route in ROUTES for actor in ACTORS]
ROUTES_WITH_IDS = [
    (route, actor) for route, has_ids in ROUTES.items() if has_ids for actor in ACTORS
]
# POSTs that only read (a body too large for a query string): a viewer may.
READING_POSTS = {("sync-download", "POST")}
OWN_WRITES = [
    (route, actor)
    for route, has_ids in ROUTES.items()
    if has_ids and route[1] in ("POST", "DELETE") and route not in READING_POSTS
    for actor in REFUSED_WRITERS
]


def route_id(value: Any) -> str | None:
    return f"{value[1]} {value[0]}" if isinstance(value, tuple) else None


@pytest.fixture(scope="module")
def http(asgi_server):
    with httpx.Client(base_url=asgi_server, timeout=120) as client:
        yield client


def rest_call(http, key: str, method: str, name: str, case: RestCase, kwargs: dict[str, Any]):
    headers = {"Authorization": f"Bearer {key}"}
    if case.raw is not None:
        headers["Content-Type"] = "application/octet-stream"
    return http.request(
        method,
        reverse(f"api:{name}", kwargs=kwargs),
        params={**case.query, "team": "beta"},  # a session's team switch: a key ignores it
        headers=headers,
        content=case.raw,
        json=case.json,
    )


# The scene is a parameter of its own, so the tests of one backend share one scene.
@pytest.mark.parametrize("matrix_scene", FAKE, indirect=True)
@pytest.mark.parametrize("route, actor", EVERY_ROUTE, ids=route_id)
def test_rest_route_with_team_b_ids(request, matrix_scene, http, route, actor):
    check_route(request, matrix_scene, http, route, actor)


@pytest.mark.parametrize("matrix_scene", DOCKER, indirect=True)
@pytest.mark.parametrize("route, actor", ROUTES_WITH_IDS, ids=route_id)
def test_rest_route_with_team_b_ids_on_docker(request, matrix_scene, http, route, actor):
    check_route(request, matrix_scene, http, route, actor)


def check_route(request, scene, http, route: tuple[str, str], actor: str) -> None:
    case = REST_CASES.get(route)
    if case is None:
        pytest.fail(f"REST route {route} has no case in REST_CASES: add one")
    name, method = route
    key = scene.keys[actor]
    if case.scoped is not None:
        created = request.getfixturevalue("matrix_created")  # before the call: it looks back
        response = rest_call(http, key, method, name, case, {})
        assert not scene.shows_team_b(response.text), response.text
        case.scoped(scene, actor, response, created)
        assert scene.changes(scene.creation_by(actor)) == []
        return
    assert case.variants, f"{route} takes ids but its case names none"
    for variant in case.variants:
        real = replace(case, json=scene.fill(case.json))
        made_up = replace(case, json=scene.fill(case.json, ghost=True))
        answer = rest_call(http, key, method, name, real, scene.fill(variant))
        ghost = rest_call(http, key, method, name, made_up, scene.fill(variant, ghost=True))
        own_sandbox = variant.get("sandbox_id") == A_SB or route in matrix_egress.ROLE_FIRST
        refused = own_sandbox and actor in REFUSED_WRITERS and method in ("POST", "DELETE")
        assert answer.status_code == (403 if refused else 404), (variant, answer.text)
        assert "not found" in answer.text or refused, answer.text
        assert answer.json() == json.loads(scene.unghost(ghost.text)), "ids can be probed"
        assert scene.changes(engines=engines_named(variant)) == [], (variant, answer.text)


def test_every_case_names_a_route_that_exists():
    assert set(REST_CASES) - set(ROUTES) == set(), "cases for routes that are gone"


@pytest.mark.parametrize("matrix_scene", BACKENDS, indirect=True)
@pytest.mark.parametrize("route, actor", OWN_WRITES, ids=route_id)
def test_rest_writes_on_the_own_team_refused_to_viewer_and_read_only_key(
    matrix_scene, http, route, actor
):
    scene, case = matrix_scene, REST_CASES[route]
    for variant in case.variants:
        kwargs = scene.fill(variant, own=True)
        answer = rest_call(http, scene.keys[actor], route[1], route[0], case, kwargs)
        assert answer.status_code == 403, (variant, answer.text)
        assert REFUSED_WRITERS[actor] in answer.json()["detail"], answer.text
        assert scene.changes(engines=engines_named(variant, own=True)) == []


# --- MCP -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ToolCase:
    variants: list[dict[str, Any]] = field(default_factory=list)  # arguments with ids
    write: bool = False  # needs write: a viewer's or a read-only key's call is refused
    args: dict[str, Any] = field(default_factory=dict)  # tools without ids: their arguments
    scoped: Callable[..., None] | None = None  # tools without ids: what the answer must show


def on_b(**args: Any) -> list[dict[str, Any]]:
    return [{"sandbox_id": B_SB, **args}]


TASK_B = [{"task_id": B_JOB, "sandbox_id": B_SB}, {"task_id": B_JOB, "sandbox_id": A_SB}]
TOOL_CASES: dict[str, ToolCase] = {
    "get_sandbox": ToolCase(on_b()),
    "delete_sandbox": ToolCase(on_b(), write=True),
    "select_sandbox": ToolCase(on_b()),  # changes the session's selection, needs only read
    # Also in team B's shell session, with stdin (matrix_terminals.py: the sessions' tools).
    "run_command": ToolCase(
        on_b(command=PWN) + on_b(command="cat > pwned", session="main", stdin="x"), write=True
    ),
    "run_python": ToolCase(on_b(code="open('/workspace/pwned', 'w')"), write=True),
    "install_packages": ToolCase(on_b(packages=["six"]), write=True),
    "run_tests": ToolCase(on_b(), write=True),
    "start_background": ToolCase(on_b(command=PWN), write=True),
    "check_background": ToolCase(TASK_B),
    "cancel_background": ToolCase(TASK_B, write=True),
    "upload_files": ToolCase(on_b(files=[{"path": "pwned.txt", "content": "x"}]), write=True),
    "write_file": ToolCase(on_b(path="pwned.txt", content="x"), write=True),
    "download_files": ToolCase(on_b(paths=["/workspace"])),
    "list_files": ToolCase(on_b()),
    "read_file": ToolCase(on_b(path="secret.txt")),
    "list_hosts": ToolCase(scoped=tool_hosts),
    "list_sandboxes": ToolCase(scoped=tool_listed),
    "get_active_sandbox": ToolCase(scoped=tool_active),
    "create_sandbox": ToolCase(write=True, args={"name": "where?"}, scoped=tool_creates),
    "run_once": ToolCase(write=True, args={"command": "true"}, scoped=tool_creates),
    "deploy_app": ToolCase(on_b(command=PWN, port=8000), write=True),
    "get_preview_url": ToolCase(on_b(port=8000), write=True),
    "stop_app": ToolCase(on_b(port=8000), write=True),
    "get_file_link": ToolCase(on_b(path="secret.txt"), write=True),
    "list_links": ToolCase(on_b()),
    "get_sandbox_metrics": ToolCase(on_b(live=True)),
    "revoke_link": ToolCase(LINK_B, write=True),
    **dict.fromkeys(("pause_sandbox", "resume_sandbox", "stop_sandbox"), ToolCase(on_b(), True)),
}
TOOL_CASES.update(matrix_snapshots.tool_cases(ToolCase, text_of))  # snapshots' tools
TOOL_CASES.update(matrix_terminals.tool_cases(ToolCase))  # shell sessions' tools
TOOL_CASES.update(matrix_egress.tool_cases(ToolCase))  # get_network_log


async def tool_case(client, orm, scene, actor: str, name: str, case: ToolCase) -> list[str]:
    """One tool's calls with team B's ids; what went wrong, if anything."""
    if case.scoped is not None:
        if scene.backend != "fake" and case.write:
            return []  # creations: on the in-memory backend only
        return await scoped_tool_case(client, orm, scene, actor, name, case)
    problems: list[str] = []
    for variant in case.variants:
        answer = await client.call_tool(name, scene.fill(variant), raise_on_error=False)
        ghost = await client.call_tool(name, scene.fill(variant, ghost=True), raise_on_error=False)
        refused = case.write and variant.get("sandbox_id") == A_SB and actor in REFUSED_WRITERS
        expected = REFUSED_WRITERS[actor] if refused else "not found"
        if not answer.is_error or expected not in text_of(answer):
            problems.append(f"{name}{variant}: not {expected!r}: {text_of(answer)[:500]}")
        if text_of(answer) != scene.unghost(text_of(ghost)):
            problems.append(f"{name}{variant}: {text_of(answer)!r} != {text_of(ghost)!r}")
        changed = await orm(scene.changes, engines=engines_named(variant))
        problems += [f"{name}{variant} changed: {change}" for change in changed]
    return problems


async def scoped_tool_case(client, orm, scene, actor: str, name: str, case: ToolCase) -> list[str]:
    """A tool without ids: it acts in team A only and shows nothing of team B."""
    problems: list[str] = []
    created = await orm(scene.created_since)
    if name == "get_active_sandbox":  # a selection that names team B's sandbox
        await orm(scene.select, actor, scene.foreign["sandbox"])
    result = await client.call_tool(name, case.args, raise_on_error=False)
    try:
        await orm(case.scoped, scene, actor, result, created)
    except AssertionError as exc:
        problems.append(f"{name}: {exc}")
    if scene.shows_team_b(text_of(result)):
        problems.append(f"{name} shows team B's things: {text_of(result)[:500]}")
    changed = await orm(scene.changes, scene.creation_by(actor))
    await orm(scene.undo_creations, actor, created)
    return problems + [f"{name} changed: {change}" for change in changed]


@pytest.mark.parametrize("matrix_scene", BACKENDS, indirect=True)
@pytest.mark.parametrize("actor", ACTORS)
def test_mcp_tool_with_team_b_ids(matrix_scene, asgi_server, matrix_orm, actor):
    scene = matrix_scene

    async def conversation() -> list[str]:
        problems = []
        async with matrix.in_session(asgi_server, scene.keys[actor]) as client:
            for tool in await client.list_tools():
                case = TOOL_CASES.get(tool.name)
                if case is None:
                    problems.append(f"MCP tool {tool.name} has no case in TOOL_CASES: add one")
                    continue
                problems += await tool_case(client, matrix_orm, scene, actor, tool.name, case)
        return problems

    problems = run(conversation())
    assert problems == [], "\n\n".join(problems)


@pytest.mark.parametrize("matrix_scene", BACKENDS, indirect=True)
@pytest.mark.parametrize("actor", list(REFUSED_WRITERS))
def test_mcp_write_tools_on_the_own_team_refused_to_viewer_and_read_only_key(
    matrix_scene, asgi_server, matrix_orm, actor
):
    async def conversation() -> list[str]:
        problems = []
        async with Client(f"{asgi_server}/mcp/", auth=matrix_scene.keys[actor]) as client:
            for tool in await client.list_tools():
                case = TOOL_CASES.get(tool.name, ToolCase())  # no case: the test above fails
                for variant in case.variants if case.write else []:
                    args = matrix_scene.fill(variant, own=True)
                    result = await client.call_tool(tool.name, args, raise_on_error=False)
                    if not result.is_error or REFUSED_WRITERS[actor] not in text_of(result):
                        problems.append(f"{tool.name}{variant}: {text_of(result)[:500]}")
                    own = engines_named(variant, own=True)
                    changed = await matrix_orm(matrix_scene.changes, engines=own)
                    problems += [f"{tool.name}{variant} changed: {c}" for c in changed]
        return problems

    problems = run(conversation())
    assert problems == [], "\n\n".join(problems)


@pytest.mark.parametrize("matrix_scene", FAKE, indirect=True)
def test_every_tool_has_a_case_that_agrees_with_its_annotations(matrix_scene, asgi_server):
    """A tool the catalog calls read-only must not need write here, and one that needs write
    must not be called read-only (select_sandbox only changes the session's own selection)."""

    async def catalog():
        async with Client(f"{asgi_server}/mcp/", auth=matrix_scene.keys["viewer"]) as client:
            return await client.list_tools()

    tools = {tool.name: tool for tool in run(catalog())}
    assert set(tools) == set(TOOL_CASES), "tools without a case, or cases without a tool"
    for name, tool in tools.items():
        read_only = bool(tool.annotations and tool.annotations.read_only_hint)
        assert not (read_only and TOOL_CASES[name].write), name
        assert read_only or TOOL_CASES[name].write or name == "select_sandbox", name
