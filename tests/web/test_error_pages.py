"""Django's error pages (templates/404.html, 403.html, 500.html through platform_site/errors.py):
in the team pages' layout instead of Django's bare "Not Found"; JSON in the API's shape under
/api/; and the 500 page rendered with no database at all."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import AnonymousUser
from django.core.exceptions import PermissionDenied
from django.test import Client, RequestFactory

from platform_site import errors


@pytest.mark.django_db
def test_an_unknown_address_gets_the_layouts_404(login, alice):
    response = login(alice).get("/no-such-page/")
    page = response.content.decode()
    assert response.status_code == 404 and response["Content-Type"].startswith("text/html")
    assert "<h1>Page not found</h1>" in page and "<code>/no-such-page/</code>" in page
    assert 'class="topbar"' in page and 'aria-label="Main"' in page  # the team pages' layout
    assert 'href="/sandboxes/deleted/"' in page and "style=" not in page


@pytest.mark.django_db
def test_an_anonymous_404_offers_the_login():
    response = Client().get("/no-such-page/")
    page = response.content.decode()
    assert response.status_code == 404 and 'href="/login/"' in page
    assert 'aria-label="Main"' not in page


@pytest.mark.django_db
def test_the_api_keeps_its_json_errors(login, alice):
    client = login(alice)
    unknown = client.get("/api/v1/no-such-endpoint/")
    assert unknown.status_code == 404 and unknown["Content-Type"] == "application/json"
    assert json.loads(unknown.content)["code"] == "not_found"
    missing = client.get("/api/v1/sandboxes/sb_0000ghost000/")  # a view's own 404
    assert missing.status_code in (401, 403, 404) and missing["Content-Type"] == "application/json"


@pytest.mark.django_db
def test_a_permission_denied_gets_the_layouts_403(alice):
    request = RequestFactory().get("/somewhere/")
    request.user = alice
    request.session = {}
    response = errors.permission_denied(request, PermissionDenied())
    page = response.content.decode()
    assert response.status_code == 403 and "<h1>Not allowed</h1>" in page
    api = RequestFactory().get("/api/v1/x/")
    api.user = AnonymousUser()
    answer = errors.permission_denied(api, PermissionDenied())
    assert json.loads(answer.content) == {"detail": "you may not do this", "code": "forbidden"}


def test_the_500_page_needs_no_database():
    """No django_db mark: any query here fails the test (pytest-django blocks the database)."""
    response = errors.server_error(RequestFactory().get("/sandboxes/x/"))
    page = response.content.decode()
    assert response.status_code == 500
    assert "Something went wrong on Sandhub's side" in page and 'class="topbar"' in page
    assert "web/app.css" in page  # styled like the team pages
    api = errors.server_error(RequestFactory().get("/api/v1/sandboxes/"))
    assert api.status_code == 500 and json.loads(api.content)["code"] == "error"
