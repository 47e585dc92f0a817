"""What the sandbox list's search returns (sandboxes/services/sandbox_search.py): one page of
the team's sandboxes, and what it was asked for. Kept apart from results.py."""

from __future__ import annotations

from pydantic import Field

from sandboxes.contract.results import Result, SandboxInfo


class SandboxPage(Result):
    sandboxes: list[SandboxInfo]
    total: int = Field(description="sandboxes matching the search, on every page")
    page: int = Field(description="this page's number, from 1")
    pages: int = Field(description="how many pages there are (at least 1)")
    per_page: int
    query: str = Field(description="the search as applied (trimmed); empty: every sandbox")
    sort: str = Field(description="name, created, expiry or status; '-' first: descending")
