"""The link tools over streamable HTTP (mcp_bridge/tools_links.py): get_file_link hands an
agent the same expiring, audited, no-login download URL the sandbox page makes; list_links
and revoke_link show and end links one by one. A live uvicorn serving platform_site.asgi, a
real fastmcp.Client with a Bearer key, the real Docker engine behind the services."""

from __future__ import annotations

from urllib.parse import urlsplit

import httpx2 as httpx
import pytest

from sandboxes import services
from tenants.models import AuditLog
from tests.live import in_thread, mcp, run

pytestmark = [
    pytest.mark.docker,
    # Log notifications still reach clients on the older protocol; the SDK warns about them.
    pytest.mark.filterwarnings("ignore:The logging capability is deprecated"),
]

REPORT = "total: 42\n"


@pytest.fixture(scope="module")
def report(world, shared_sandbox) -> str:
    services.write_file(world.principal(), shared_sandbox, "out/report.txt", REPORT)
    return "out/report.txt"


def text_of(result) -> str:
    return "\n".join(getattr(part, "text", "") for part in result.content)


def fetch(url: str) -> httpx.Response:
    """The URL as a person's browser opens it: no key, no session, no cookie."""
    with httpx.Client() as anyone:
        return anyone.get(url)


def test_get_file_link_gives_a_url_that_downloads_without_credentials(
    asgi_server, world, shared_sandbox, report
):
    async def conversation():
        async with mcp(asgi_server, world.keys["alice"]) as client:
            args = {"sandbox_id": shared_sandbox, "path": report}
            return (await client.call_tool("get_file_link", args)).structured_content

    link = run(conversation())
    assert set(link) == {"url", "link_id", "sandbox_id", "path", "expires_at"}
    assert link["url"].startswith(f"{asgi_server}/links/shl_"), link["url"]
    assert (link["sandbox_id"], link["path"]) == (shared_sandbox, "/workspace/out/report.txt")
    response = fetch(link["url"])
    assert response.status_code == 200 and response.text == REPORT
    assert response.headers["content-disposition"] == 'attachment; filename="report.txt"'
    (made,) = AuditLog.objects.filter(action="files.link.create", details__link_id=link["link_id"])
    assert (made.actor, made.channel) == (world.alice, "mcp")
    (opened,) = AuditLog.objects.filter(action="files.link.open", details__link_id=link["link_id"])
    assert (opened.outcome, opened.actor, opened.team) == ("ok", None, world.team_a)
    assert opened.target_id == shared_sandbox and opened.details["created_by"] == "alice"
    assert urlsplit(link["url"]).path.count("/") == 3  # /links/<token>/: nothing else in it


def test_one_link_revoked_through_mcp_while_another_keeps_working(
    asgi_server, world, shared_sandbox, report
):
    args = {"sandbox_id": shared_sandbox, "path": report}

    async def conversation():
        async with mcp(asgi_server, world.keys["alice"]) as client:
            keep = (await client.call_tool("get_file_link", args)).structured_content
            cut = (await client.call_tool("get_file_link", args)).structured_content
            revoke = {"sandbox_id": shared_sandbox, "link_id": cut["link_id"]}
            revoked = (await client.call_tool("revoke_link", revoke)).structured_content
            listed = await client.call_tool("list_links", {"sandbox_id": shared_sandbox})
            return keep, cut, revoked, listed.structured_content["links"]

    keep, cut, revoked, listed = run(conversation())
    assert revoked["id"] == cut["link_id"] and revoked["revoked_by"] == "alice"
    assert fetch(cut["url"]).status_code == 404
    assert fetch(keep["url"]).text == REPORT
    ids = [link["id"] for link in listed]
    assert keep["link_id"] in ids and cut["link_id"] not in ids
    shown = next(link for link in listed if link["id"] == keep["link_id"])
    assert (shown["kind"], shown["path"], shown["created_by"]) == ("file", keep["path"], "alice")


def test_viewers_and_other_teams_get_no_file_links(asgi_server, world, shared_sandbox, report):
    box = {"sandbox_id": shared_sandbox}

    async def conversation():
        made = await in_thread(services.create_file_link, world.principal(), shared_sandbox, report)
        calls = [
            ("get_file_link", {**box, "path": report}),
            ("revoke_link", {**box, "link_id": made.link_id}),
            ("list_links", box),
        ]
        answers = {}
        for key in ("victor", "alice_read", "bob"):
            async with mcp(asgi_server, world.keys[key]) as client:
                answers[key] = [
                    await client.call_tool(name, args, raise_on_error=False) for name, args in calls
                ]
        return made, answers

    made, answers = run(conversation())
    for key, reason in [("victor", "a viewer may not"), ("alice_read", "no write scope")]:
        made_link, revoke, listed = answers[key]
        assert made_link.is_error and reason in text_of(made_link), text_of(made_link)
        assert revoke.is_error and reason in text_of(revoke), text_of(revoke)
        assert not listed.is_error  # seeing a sandbox's links is reading
        assert made.link_id in {link["id"] for link in listed.structured_content["links"]}
    for answer in answers["bob"]:
        assert answer.is_error and f"sandbox {shared_sandbox} not found" in text_of(answer)
    assert fetch(services.file_link_url(f"{asgi_server}/", made.token)).text == REPORT


def test_a_viewer_gets_only_a_short_preview_token(asgi_server, world, shared_sandbox):
    week = {"sandbox_id": shared_sandbox, "port": 8000, "expires_seconds": 7 * 24 * 3600}

    async def conversation():
        async with mcp(asgi_server, world.keys["alice"]) as client:
            await client.call_tool("get_preview_url", {"sandbox_id": shared_sandbox, "port": 8000})
        async with mcp(asgi_server, world.keys["victor"]) as client:
            long = await client.call_tool("get_preview_url", week, raise_on_error=False)
            short = await client.call_tool("get_preview_url", {**week, "expires_seconds": 600})
            listed = await client.call_tool("list_links", {"sandbox_id": shared_sandbox})
        return long, short.structured_content, listed.structured_content["links"]

    long, short, listed = run(conversation())
    assert long.is_error and "a viewer may get preview links valid at most 600 s" in text_of(long)
    assert "sandhub_token=shp_" in short["url"]
    mine = [link for link in listed if link["created_by"] == "victor"]
    assert [(link["kind"], link["port"], link["min_role"]) for link in mine] == [
        ("preview", 8000, "viewer")
    ]
