"""The deploy form's port: required, with no placeholder that reads as a value already there
(the example is in the help text), and a clear error when left empty."""

from __future__ import annotations

import re

import pytest

from sandboxes.models import CommandExecution
from tests.web.helpers import field_errors

pytestmark = pytest.mark.django_db


def port_input(page: str, name: str) -> str:
    found = re.search(rf'<input[^>]*name="{name}"[^>]*>', page)
    assert found, f"no {name} field"
    return found.group(0)


def test_the_port_fields_are_required_with_no_placeholder(login, sandbox, alice):
    page = login(alice).get(f"/sandboxes/{sandbox}/").content.decode()
    for name in ("deploy-port", "preview-port"):
        field = port_input(page, name)
        assert "placeholder" not in field and " required" in field
    help_text = page.split('id="field-deploy-port"', 1)[1].split("</div>", 1)[0]
    assert "e.g. 8000" in help_text


def test_deploying_without_a_port_says_so_and_starts_nothing(login, sandbox, alice):
    response = login(alice).post(
        f"/sandboxes/{sandbox}/previews/deploy/", {"deploy-command": "python3 -m http.server"}
    )
    assert response.status_code == 400
    errors = field_errors(response.content.decode(), "deploy-port")
    assert errors == ["Type the port the app listens on, e.g. 8000."]
    assert not CommandExecution.objects.exists()
