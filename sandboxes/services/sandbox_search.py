"""The sandbox list's search, sort and pages, done by the database: a team's list is read one
page at a time however many sandboxes it has."""

from __future__ import annotations

import math
from typing import Any

from django.db.models import F, Q, QuerySet

from sandboxes.contract.errors import InvalidInput
from sandboxes.contract.listing import SandboxPage
from sandboxes.contract.results import SandboxInfo
from sandboxes.policy import access
from sandboxes.policy.access import READ
from tenants.auditing import AUDIT_VIEW, audited, current
from tenants.principal import Principal

# What a list may be sorted by -> the column; ties are broken by the newest first.
SORTS = {"name": "name", "created": "created_at", "expiry": "expires_at", "status": "status"}
DEFAULT_SORT = "-created"
PER_PAGE = 25
MAX_PER_PAGE = 200
MAX_QUERY_CHARS = 200


def _sort(sort: Any) -> tuple[str, Any]:
    if sort is None or sort == "":
        sort = DEFAULT_SORT
    if not isinstance(sort, str) or sort.lstrip("-") not in SORTS:
        choices = ", ".join(SORTS)
        raise InvalidInput(
            f"cannot sort by {str(sort)[:40]!r}: sort by {choices}, with '-' first for "
            "descending (e.g. -created)"
        )
    column = F(SORTS[sort.lstrip("-")])
    # Sandboxes without an expiry (or a name) come last either way.
    order = column.desc(nulls_last=True) if sort.startswith("-") else column.asc(nulls_last=True)
    return sort, order


def _query(query: Any) -> str:
    if query is None:
        return ""
    if not isinstance(query, str) or len(query) > MAX_QUERY_CHARS or "\x00" in query:
        raise InvalidInput(f"the search must be text of at most {MAX_QUERY_CHARS} characters")
    return query.strip()


def _number(value: Any, what: str, maximum: int | None = None) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        number = 0
    if number < 1 or (maximum is not None and number > maximum):
        limit = f" to {maximum}" if maximum is not None else " or more"
        raise InvalidInput(f"{what} must be a whole number from 1{limit}; got {str(value)[:40]!r}")
    return number


def _matching(queryset: QuerySet, query: str) -> QuerySet:
    """Sandboxes whose name, id, image or host contains each word of the search."""
    for word in query.split():
        queryset = queryset.filter(
            Q(name__icontains=word)
            | Q(public_id__icontains=word)
            | Q(image__name__icontains=word)
            | Q(host__name__icontains=word)
        )
    return queryset


@audited("sandbox.list", "sandbox", kind=AUDIT_VIEW)
def search_sandboxes(
    principal: Principal,
    *,
    query: str | None = None,
    sort: str | None = None,
    page: int | str = 1,
    per_page: int | str | None = None,
) -> SandboxPage:
    """One page of the principal's sandboxes matching `query` (words, each found in the name,
    id, image or host, any case), sorted by `sort`. A page past the last gives the last."""
    access.require(principal, READ, "list sandboxes")
    sort, order = _sort(sort)
    words = _query(query)
    number = _number(page, "page")
    size = _number(PER_PAGE if per_page is None else per_page, "per_page", MAX_PER_PAGE)
    current().details.update({"query": words, "sort": sort, "page": number})
    matching = _matching(access.sandboxes_of(principal), words)
    total = matching.count()
    pages = max(1, math.ceil(total / size))
    number = min(number, pages)
    start = (number - 1) * size
    rows = matching.order_by(order, "-created_at", "-pk")[start : start + size]
    return SandboxPage(
        sandboxes=[SandboxInfo.from_model(s) for s in rows],
        total=total,
        page=number,
        pages=pages,
        per_page=size,
        query=words,
        sort=sort,
    )
