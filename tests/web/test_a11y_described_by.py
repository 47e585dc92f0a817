"""Every aria-describedby on the team pages names an element of the same page: help texts and
errors are read out with their field (templates/web/_field.html gives them the ids Django's
widgets name: <id>_helptext, <id>_error). Every form of the pages, as first shown and with
errors after a refused post."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db

PAGES = ["/", "/keys/", "/hosts/", "/password/", "/team/", "/team/audit/", "/team/commands/"]
SANDBOX_PAGES = ["", "commands/"]
# Refused posts, so the forms come back with their errors beside the fields.
REFUSED_POSTS = {
    "/sandboxes/create/": {"name": "x" * 300, "cpus": "-1", "memory_mb": "1"},
    "/keys/": {"name": "x" * 300, "scopes": ["nonsense"]},
    "/team/members/add/": {"username": "nobody", "role": "member"},
    "/password/": {"old_password": "wrong", "new_password1": "a", "new_password2": "b"},
}


class Ids(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.described: list[tuple[str, str]] = []  # (element's name or id, id it names)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if values.get("id"):
            self.ids.add(values["id"] or "")
        for target in (values.get("aria-describedby") or "").split():
            self.described.append((values.get("name") or values.get("id") or tag, target))


def dangling(html: str) -> tuple[list[str], list[str]]:
    """(what aria-describedby names, what of it is missing)."""
    parser = Ids()
    parser.feed(html)
    named = [target for _, target in parser.described]
    missing = [
        f"{who} -> #{target}" for who, target in parser.described if target not in parser.ids
    ]
    return named, missing


def test_every_described_by_id_exists(login, alice, sandbox) -> None:
    client = login(alice)
    responses = {url: client.get(url) for url in PAGES}
    for suffix in SANDBOX_PAGES:
        url = f"/sandboxes/{sandbox}/{suffix}"
        responses[url] = client.get(url)
    for url, data in REFUSED_POSTS.items():
        responses[f"POST {url}"] = client.post(url, data)
    responses["/login/ (signed out)"] = Client().get("/login/")
    responses["POST /login/ (signed out)"] = Client().post("/login/", {"username": "alice"})
    named: list[str] = []
    for where, response in responses.items():
        assert response.status_code in (200, 400), where  # 400: a refused form, shown again
        found, missing = dangling(response.content.decode())
        assert missing == [], f"{where}: {missing}"
        named += found
    # Not vacuous: help texts and errors were there to be named.
    assert any(target.endswith("_helptext") for target in named), named
    assert any(target.endswith("_error") for target in named), named


def test_errors_are_named_and_read_with_their_field(login, alice) -> None:
    page = login(alice).post(*REFUSED_POSTS_TEAM).content.decode()
    field = re.search(r'<input[^>]*name="username"[^>]*>', page)
    assert field and "id_username_error" in field.group(0), field
    assert re.search(r'id="id_username_error"[^>]*>\s*<small class="error"', page)


REFUSED_POSTS_TEAM = ("/team/members/add/", REFUSED_POSTS["/team/members/add/"])
