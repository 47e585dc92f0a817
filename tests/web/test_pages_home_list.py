"""The sandbox list's search, sort and pages (sandboxes/services/sandbox_search.py through
the home page): done by the services, kept across pages, every bad parameter a clear message
with the first page, never a 500; the expiry warning in the list."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from sandboxes import services
from sandboxes.contract.errors import InvalidInput
from sandboxes.models import Sandbox
from sandboxes.services import sandbox_search

pytestmark = pytest.mark.django_db


def names(html: str) -> list[str]:
    return re.findall(r'class="sandbox-link">([^<]+)</a>', html)


@pytest.fixture
def five(fake_backend, as_alice, team_a) -> list[str]:
    team_a.max_running_sandboxes = 10
    team_a.save()
    made = [
        services.create_sandbox(as_alice, name=n).id
        for n in ("cedar", "ash", "elm", "birch", "oak-dev")
    ]
    # Expiries in another order than creation: sorting by expiry is its own order.
    for minutes, public_id in zip((50, 10, 40, 30, 20), made, strict=True):
        Sandbox.objects.filter(public_id=public_id).update(
            expires_at=timezone.now() + timedelta(minutes=minutes + 60)
        )
    return made


def test_search_by_name_id_image_and_host(login, alice, five, as_bob, fake_backend) -> None:
    client = login(alice)
    services.create_sandbox(as_bob, name="ash-of-bob")  # another team's never shows
    assert names(client.get("/?q=ash").content.decode()) == ["ash"]
    assert names(client.get(f"/?q={five[2][3:]}").content.decode()) == ["elm"]
    assert len(names(client.get("/?q=PYTHON").content.decode())) == 5  # image, any case
    assert len(names(client.get("/?q=local").content.decode())) == 5  # host
    assert names(client.get("/?q=oak+dev").content.decode()) == ["oak-dev"]  # every word
    html = client.get("/?q=nothing-like-it").content.decode()
    assert names(html) == [] and "No sandbox matches “nothing-like-it”" in html


def test_sort_by_each_column_both_ways(login, alice, five) -> None:
    client = login(alice)
    assert names(client.get("/?sort=name").content.decode()) == [
        "ash",
        "birch",
        "cedar",
        "elm",
        "oak-dev",
    ]
    assert names(client.get("/?sort=-name").content.decode())[0] == "oak-dev"
    assert names(client.get("/").content.decode())[0] == "oak-dev"  # newest first
    assert names(client.get("/?sort=created").content.decode())[0] == "cedar"
    assert names(client.get("/?sort=expiry").content.decode()) == [
        "ash",
        "oak-dev",
        "birch",
        "elm",
        "cedar",
    ]
    html = client.get("/?sort=name&q=a").content.decode()
    header = re.search(r'<th aria-sort="ascending" class="sortable"><a href="([^"]+)"', html)
    assert header and header.group(1) == "?q=a&amp;sort=-name"  # flips, keeps the search
    assert html.count('aria-sort="none"') == 3


def test_pages_keep_the_search_and_sort(login, alice, five, monkeypatch) -> None:
    monkeypatch.setattr(sandbox_search, "PER_PAGE", 2)
    client = login(alice)
    first = client.get("/?sort=name").content.decode()
    assert names(first) == ["ash", "birch"] and "Page 1 of 3" in first
    assert 'href="?sort=name&amp;page=2" rel="next"' in first
    assert names(client.get("/?sort=name&page=3").content.decode()) == ["oak-dev"]
    assert names(client.get("/?sort=name&page=99").content.decode()) == ["oak-dev"]  # the last
    searched = client.get("/?q=e&sort=-name").content.decode()
    assert names(searched) == ["oak-dev", "elm"]
    assert 'href="?q=e&amp;sort=-name&amp;page=2" rel="next"' in searched


@pytest.mark.parametrize(
    "query, message",
    [
        ("sort=size", "cannot sort by &#x27;size&#x27;"),
        ("page=two", "page must be a whole number"),
        ("page=0", "page must be a whole number"),
        ("q=" + "x" * 201, "at most 200 characters"),
    ],
)
def test_bad_parameters_are_a_clear_message(login, alice, five, query, message) -> None:
    response = login(alice).get("/?" + query)
    html = response.content.decode()
    assert response.status_code == 400 and message in html and 'id="list-error"' in html
    assert len(names(html)) == 5  # the first page as it comes by default


def test_htmx_search_gets_the_message_with_200(login, alice, five) -> None:
    response = login(alice).get("/?sort=bogus", HTTP_HX_REQUEST="true")
    assert response.status_code == 200 and 'id="list-error"' in response.content.decode()


def test_the_service_refuses_bad_input_itself(as_alice, five) -> None:
    with pytest.raises(InvalidInput, match="per_page"):
        services.search_sandboxes(as_alice, per_page=1000)
    found = services.search_sandboxes(as_alice, query=" elm ", sort="-status", per_page=1)
    assert (found.total, found.query, found.sandboxes[0].name) == (1, "elm", "elm")


def test_the_list_warns_of_a_sandbox_about_to_expire(login, alice, five, settings) -> None:
    settings.SANDHUB_EXPIRY_WARNING_MINUTES = 15
    Sandbox.objects.filter(public_id=five[1]).update(
        expires_at=timezone.now() + timedelta(minutes=7, seconds=30)
    )
    html = login(alice).get("/").content.decode()
    row = html[html.index(f'data-sandbox-id="{five[1]}"') :]
    row = row[: row.index("</tr>")]
    assert "expires in 8 min" in row and "Extend 60 min" in row
    assert html.count("expires in") == 1  # the others have more than 15 minutes
