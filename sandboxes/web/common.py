"""What the web views share: a refusal page for service errors, service errors put next to
the form field they are about, and the pagination of long lists."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django import forms
from django.core.paginator import Page, Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from sandboxes.contract.errors import NotFound, ServiceError

PAGE_SIZE = 50


def refused(request: HttpRequest, exc: ServiceError) -> HttpResponse:
    """The service's message on a page of its own, with the service error's HTTP status
    (another team's object: 404, a viewer's write: 403)."""
    title = "Not found" if isinstance(exc, NotFound) else "Not possible"
    context = {"title": title, "message": exc.message}
    return render(request, "web/refused.html", context, status=exc.http_status)


def attach_error(form: forms.Form, exc: ServiceError, fields: Mapping[str, str]) -> None:
    """Show a service's refusal next to the field it is about: the first field whose keyword
    (`fields`: word in the message -> field name) the message names, else above the form."""
    text = exc.message.lower()
    for word, field in fields.items():
        if word in text and field in form.fields:
            form.add_error(field, exc.message)
            return
    form.add_error(None, exc.message)


def paginate(request: HttpRequest, rows: Any) -> Page:
    """One page of `rows` (?page=N; a page out of range gives the nearest one)."""
    return Paginator(rows, PAGE_SIZE).get_page(request.GET.get("page"))


def query_without_page(request: HttpRequest) -> str:
    """The current filters as a query string, to keep them in the pagination links."""
    params = request.GET.copy()
    params.pop("page", None)
    return params.urlencode()
