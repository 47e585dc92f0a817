"""`web` in every template: the acting principal, the user's role and teams (page header)."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django.utils.functional import SimpleLazyObject

from sandboxes.web.principal import identity_for


def web(request: HttpRequest) -> dict[str, Any]:
    # Lazy: pages that never use it (admin, API docs) run no query for it.
    return {"web": SimpleLazyObject(lambda: identity_for(request))}
