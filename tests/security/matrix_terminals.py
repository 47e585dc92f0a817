"""The tenancy matrix's cases for terminals and shell sessions (test_matrix.py takes them):
every route and tool with team B's sandbox or terminal answers as a made-up id does, and
changes nothing; team A's own sandbox with team B's terminal id is not found either. Not a
test module."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.security.matrix import A_SB, B_SB, B_TERM

SANDBOX_B = [{"sandbox_id": B_SB}]
TERMINAL_B = [
    {"sandbox_id": B_SB, "terminal_id": B_TERM},
    {"sandbox_id": A_SB, "terminal_id": B_TERM},
]
SESSION_B = [{"sandbox_id": B_SB, "name": "main"}]


def rest_cases(case: Callable[..., Any]) -> dict[tuple[str, str], Any]:
    return {
        ("terminals", "GET"): case(SANDBOX_B),
        ("terminals", "POST"): case(SANDBOX_B, json={"cols": 80, "rows": 24}),
        ("terminal", "DELETE"): case(TERMINAL_B),
        ("sessions", "GET"): case(SANDBOX_B),
        ("session", "DELETE"): case(SESSION_B),
    }


def tool_cases(case: Callable[..., Any]) -> dict[str, Any]:
    return {
        "list_sessions": case(SANDBOX_B),
        "close_session": case(SESSION_B, write=True),
    }
