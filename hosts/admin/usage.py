"""Usage charts on admin's change pages (a sandbox's, a host's): a readonly field that draws
the last hour as the team pages do (sandboxes/web/charts.py, templates/web/_chart.html).

The field needs the request (the services take the acting principal) while Django calls a
readonly field with the object alone: change_view keeps the request in a context variable
for the time it renders the page (a ContextVar, so never another thread's request).
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.template.loader import render_to_string
from django.utils.safestring import SafeString, mark_safe

from sandboxes.contract.errors import ServiceError
from sandboxes.web import charts

_REQUEST: ContextVar[HttpRequest | None] = ContextVar("usage_admin_request", default=None)


class UsageChartsAdmin(admin.ModelAdmin):
    """Mixed into a ModelAdmin whose readonly fields include `usage_charts`."""

    class Media:
        css = {"all": ["web/usage.css"]}

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        token = _REQUEST.set(request)
        try:
            response = super().change_view(request, object_id, form_url, extra_context)
            render = getattr(response, "render", None)
            if render is not None:  # a TemplateResponse renders later, without the request
                render()
            return response
        finally:
            _REQUEST.reset(token)

    def usage_charts_of(self, made: Callable[[HttpRequest], list[charts.Chart]]) -> SafeString:
        request = _REQUEST.get()
        if request is None:
            return mark_safe("—")
        try:
            drawn = made(request)
        except ServiceError as exc:
            return mark_safe(render_to_string("admin/usage_refused.html", {"error": str(exc)}))
        html = render_to_string("admin/usage_charts.html", {"charts": drawn})
        return mark_safe(html)  # noqa: S308 - a template's output, escaped by it
