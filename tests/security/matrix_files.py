"""The tenancy matrix's cases for the files section's operations (test_matrix.py takes them):
delete, rename and new folder with team B's sandbox answer as a made-up id does and change
nothing; a viewer's or a read-only key's on team A's own sandbox are refused. Not a test
module."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.security.matrix import B_SB

SANDBOX_B = [{"sandbox_id": B_SB}]


def rest_cases(case: Callable[..., Any]) -> dict[tuple[str, str], Any]:
    return {
        ("files", "DELETE"): case(SANDBOX_B, query={"path": "secret.txt"}),
        ("files-rename", "POST"): case(SANDBOX_B, json={"path": "secret.txt", "to": "gone.txt"}),
        ("files-mkdir", "POST"): case(SANDBOX_B, json={"path": "pwned"}),
    }
