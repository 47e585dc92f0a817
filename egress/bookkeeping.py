"""The proxy's memory: policies looked up recently (a source call per connection would be a
database query per connection), and refusals counted until the next report."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Hashable

from egress.policy import PolicySource, SandboxPolicy

MAX_DISTINCT_REFUSALS = 10_000  # per report: a flood of distinct names must not grow memory


class PolicyCache:
    """Source lookups in worker threads, each answer kept `ttl` seconds (a miss a quarter of
    that: a sandbox just created is found soon)."""

    def __init__(self, source: PolicySource, ttl: float) -> None:
        self._source = source
        self._ttl = ttl
        self._entries: dict[Hashable, tuple[float, SandboxPolicy | None]] = {}

    async def by_address(self, address: str) -> SandboxPolicy | None:
        return await self._get(("address", address), lambda: self._source.by_address(address))

    async def by_token(self, sandbox_id: str, token: str) -> SandboxPolicy | None:
        return await self._get(
            ("token", sandbox_id, token), lambda: self._source.by_token(sandbox_id, token)
        )

    async def _get(
        self, key: Hashable, lookup: Callable[[], SandboxPolicy | None]
    ) -> SandboxPolicy | None:
        now = time.monotonic()
        entry = self._entries.get(key)
        if entry is not None and entry[0] > now:
            return entry[1]
        policy = await asyncio.to_thread(lookup)
        lifetime = self._ttl if policy is not None else self._ttl / 4
        if len(self._entries) > 50_000:
            self._entries.clear()
        self._entries[key] = (time.monotonic() + lifetime, policy)
        return policy


class RefusalCounts:
    def __init__(self) -> None:
        self._counts: dict[tuple[str, str, str], int] = {}

    def add(self, sandbox_id: str, destination: str, reason: str) -> None:
        key = (sandbox_id, destination, reason)
        if key in self._counts or len(self._counts) < MAX_DISTINCT_REFUSALS:
            self._counts[key] = self._counts.get(key, 0) + 1

    def take(self) -> dict[tuple[str, str, str], int]:
        """The counts since the last take (and start afresh)."""
        counts, self._counts = self._counts, {}
        return counts
