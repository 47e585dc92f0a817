"""Every model's plural, as the admin's sidebar and breadcrumbs show it, is English: no
"Sandboxs" or "Statuss" (Django only appends an "s" when a model names none)."""

from __future__ import annotations

import re

from django.apps import apps

# Nouns ending so take "es": Django's default "s" after them is the mistake looked for.
NEEDS_ES = re.compile(r"(s|x|z|ch|sh)$")


def doubled_plural(singular: str, plural: str) -> bool:
    return bool(NEEDS_ES.search(singular)) and plural == singular + "s"


def test_the_check_catches_the_mistake() -> None:
    assert doubled_plural("sandbox", "sandboxs")
    assert doubled_plural("status", "statuss")
    assert not doubled_plural("sandbox", "sandboxes")
    assert not doubled_plural("host", "hosts")


def test_no_model_has_a_doubled_s_plural() -> None:
    wrong = [
        f"{model._meta.label}: {model._meta.verbose_name_plural}"
        for model in apps.get_models()
        if doubled_plural(str(model._meta.verbose_name), str(model._meta.verbose_name_plural))
    ]
    assert wrong == []


def test_the_sandbox_list_is_called_sandboxes(staff_client) -> None:
    page = staff_client.get("/admin/").content.decode()
    assert "Sandboxes" in page
    assert "Sandboxs" not in page
