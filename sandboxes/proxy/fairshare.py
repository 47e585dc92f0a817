"""Each tenant's share of the preview proxy: how many connections one sandbox and one team
may hold open at once in this web process.

Every open preview connection holds a thread of the proxy's pool (ports.py) while it waits
on the app, two while it reads and writes at once. Without shares, one tenant whose app
accepts and never answers held them all (issue 24: ~480 stalled connections, and every other
team's previews timed out). With them a tenant past its share gets 503 and nobody else
notices: one team holds at most SANDHUB_PREVIEW_TEAM_CONNECTIONS connections, which
settings.py checks fit in half the pool.

The sandbox's share is taken before authorization, from the address alone (a refused
stranger gives it back at once); the team's after it, once the grant names the team. The
counts live in this process; every slot is given back by `release`, in a finally.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

from django.conf import settings

RETRY_AFTER_SECONDS = 5

_lock = threading.Lock()
_sandboxes: Counter[str] = Counter()
_teams: Counter[Any] = Counter()


class Share:
    """The slots one preview connection holds."""

    def __init__(self) -> None:
        self._held: list[tuple[Counter[Any], Any]] = []

    def take_sandbox(self, sandbox_id: str) -> str | None:
        """Take the sandbox's slot; the refusal's text when its share is used up."""
        cap = settings.SANDHUB_PREVIEW_SANDBOX_CONNECTIONS
        return self._take(_sandboxes, sandbox_id, cap, "this sandbox's")

    def take_team(self, team: Any) -> str | None:
        """Take the team's slot; the refusal's text when its share is used up."""
        return self._take(_teams, team, settings.SANDHUB_PREVIEW_TEAM_CONNECTIONS, "this team's")

    def _take(self, counts: Counter[Any], key: Any, cap: int, whose: str) -> str | None:
        with _lock:
            if counts[key] >= cap:
                return (
                    f"too many connections to {whose} previews at once (at most {cap}); "
                    "try again shortly"
                )
            counts[key] += 1
        self._held.append((counts, key))
        return None

    def release(self) -> None:
        with _lock:
            for counts, key in self._held:
                counts[key] -= 1
                if counts[key] <= 0:
                    del counts[key]
        self._held.clear()


def in_use() -> dict[str, dict[Any, int]]:
    """The connections held now, by sandbox and by team (for tests and diagnostics)."""
    with _lock:
        return {"sandboxes": dict(_sandboxes), "teams": dict(_teams)}
