"""One run of the load on the layout: the sandboxes made through MCP, the clients, the
faults at their offsets, and what is watched meanwhile (queue depth, the rows of the killed
web process). Runs in the test process (or the bench's), with the ORM on the test database.
Not a test module.

    result = run_load(layout, LoadConfig(seconds=45))
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from django.utils import timezone
from django_q.models import OrmQ

from sandboxes.models import CommandExecution, Sandbox
from sandboxes.models.commands import CommandStatus
from tests.cluster import load
from tests.cluster.faults import Fault, schedule
from tests.cluster.layout import Layout
from tests.live import in_thread

OPEN_STATUSES = (CommandStatus.QUEUED, CommandStatus.RUNNING)
TAG = re.compile(r"c(\d+)w(\d+)n\d+[esb]")
SETTLE_SECONDS = 30.0  # after the load, for rows to close and jobs to end


@dataclass
class LoadConfig:
    seconds: float = 60.0
    clients: int = 20
    sandboxes_per_team: int = 2
    webs: list[int] | None = None  # the web processes the clients use (default: all)
    faults: bool = True


@dataclass
class RowsWatch:
    """The rows of the killed web process still open when it died, and when they closed."""

    open_at_kill: list[int] = field(default_factory=list)
    closed_after: float | None = None  # seconds after the kill; None: not within the watch
    still_open: list[int] = field(default_factory=list)


@dataclass
class RunResult:
    config: LoadConfig
    started: float
    ended: float
    states: list[load.ClientState]
    faults: list[Fault]
    sandboxes: dict[str, str]  # sandbox id -> engine1, engine2, ssh
    queue_depth_max: int = 0
    killed_web_rows: RowsWatch = field(default_factory=RowsWatch)

    @property
    def records(self) -> list[load.CallRecord]:
        return [record for state in self.states for record in state.records]


async def create_sandboxes(layout: Layout, urls: list[str], per_team: int) -> dict[str, str]:
    """Each team's sandboxes, made through MCP (one create_sandbox call each, in parallel)."""

    async def create(tenant_index: int, n: int) -> tuple[str, str]:
        tenant = layout.tenants[tenant_index]
        client = load.open_client(urls[n % len(urls)], tenant.key, uuid.uuid4().hex)
        async with client:
            result = await client.call_tool(
                "create_sandbox",
                {
                    "memory_mb": 256,
                    "select": False,
                    "name": f"cluster-{n}",
                    "request_id": uuid.uuid4().hex,
                },  # fmt: skip
                timeout=180,
            )
        return result.structured_content["id"], tenant.where

    made = await asyncio.gather(
        *(create(t, n) for t in range(len(layout.tenants)) for n in range(per_team))
    )
    return dict(made)


def client_states(layout: Layout, config: LoadConfig, sandboxes: dict[str, str]) -> list[Any]:
    """Client i: team i mod 3, one of that team's sandboxes, home web i mod (webs used)."""
    webs = config.webs or list(range(len(layout.webs)))
    by_where: dict[str, list[str]] = {}
    for sandbox_id, where in sandboxes.items():
        by_where.setdefault(where, []).append(sandbox_id)
    states = []
    for i in range(config.clients):
        tenant = layout.tenants[i % len(layout.tenants)]
        own = by_where[tenant.where]
        state = load.ClientState(i, tenant.key, webs[i % len(webs)])
        state.sandbox_id = own[(i // len(layout.tenants)) % len(own)]
        states.append(state)
    return states


async def sample_queue(until: float, result: RunResult) -> None:
    while time.monotonic() < until:
        depth = await in_thread(OrmQ.objects.count)
        result.queue_depth_max = max(result.queue_depth_max, depth)
        await asyncio.sleep(1.0)


def open_rows_of_web(sandbox_ids: list[str], web: int, before: Any) -> list[int]:
    # Background jobs are the workers' to supervise, not the web process's: they run on.
    rows = CommandExecution.objects.filter(
        sandbox__public_id__in=sandbox_ids,
        status__in=OPEN_STATUSES,
        created_at__lte=before,
        background=False,
    ).values_list("pk", "command")
    return [pk for pk, command in rows if (m := TAG.search(command)) and int(m[2]) == web]


def still_open(ids: set[int]) -> set[int]:
    rows = CommandExecution.objects.filter(pk__in=ids, status__in=OPEN_STATUSES)
    return set(rows.values_list("pk", flat=True))


async def watch_killed_rows(fault: Fault, web: int, result: RunResult, deadline: float) -> None:
    """From the kill on: which of the web's rows were open, and when the last one closed."""
    while "killed_at" not in fault.notes:
        await asyncio.sleep(0.05)
    killed_at = float(fault.notes["killed_at"])  # type: ignore[arg-type]
    wall = timezone.now()
    ids = list(result.sandboxes)
    watch = result.killed_web_rows
    watch.open_at_kill = await in_thread(open_rows_of_web, ids, web, wall)
    pending = set(watch.open_at_kill)
    while pending and time.monotonic() < deadline:
        pending = await in_thread(still_open, pending)
        if pending:
            await asyncio.sleep(0.5)
    watch.still_open = sorted(pending)
    if not pending:
        watch.closed_after = time.monotonic() - killed_at


async def run_faults(faults: list[Fault], started: float) -> None:
    """Each fault at its offset, whatever the others take (a web restart takes seconds)."""

    async def at_offset(fault: Fault) -> None:
        await asyncio.sleep(max(0.0, started + fault.offset - time.monotonic()))
        await asyncio.to_thread(fault.run)

    await asyncio.gather(*(at_offset(fault) for fault in faults))


async def _run(layout: Layout, config: LoadConfig) -> RunResult:
    urls = layout.urls
    sandboxes = await create_sandboxes(layout, urls, config.sandboxes_per_team)
    states = client_states(layout, config, sandboxes)
    for state in states:
        await load.connect(state, urls, time.monotonic() + 30)
    faults = schedule(layout, config.seconds) if config.faults else []
    started = time.monotonic()
    until = started + config.seconds
    result = RunResult(config, started, until, states, faults, sandboxes)
    watchers = [asyncio.create_task(sample_queue(until, result))]
    web_faults = [f for f in faults if f.name.startswith("kill -9 web")]
    if web_faults:
        watchers.append(asyncio.create_task(
            watch_killed_rows(web_faults[0], 1, result, until + SETTLE_SECONDS)
        ))  # fmt: skip
    try:
        await asyncio.gather(
            run_faults(faults, started), *(load.client_loop(s, urls, until) for s in states)
        )
        result.ended = time.monotonic()
        await asyncio.gather(
            *(load.finish_jobs(s, urls, result.ended + SETTLE_SECONDS) for s in states)
        )
        await asyncio.gather(*watchers)
    finally:
        for task in watchers:
            task.cancel()
        await asyncio.gather(*(load.close(s) for s in states))
    return result


def run_load(layout: Layout, config: LoadConfig) -> RunResult:
    return asyncio.run(_run(layout, config))


def placed_on(result: RunResult) -> dict[str, str]:
    """Sandbox id -> the name of the host the database says it is on."""
    rows = Sandbox.objects.filter(public_id__in=list(result.sandboxes))
    return {row.public_id: row.host.name for row in rows.select_related("host")}


def delete_sandboxes(layout: Layout, sandboxes: dict[str, str]) -> list[str]:
    """Delete the run's sandboxes as their teams' owners, wait for the removals, and
    reconcile the layout's hosts at once (grace 0: the run's instance label only)."""
    from hosts.backends import reset_backends
    from sandboxes import services
    from sandboxes.housekeeping.reconcile import reconcile
    from sandboxes.services import removal
    from tenants.models import Channel
    from tenants.principal import Principal

    reset_backends()  # this process's SSH connection was cut too: new ones
    problems = []
    for tenant in layout.tenants:
        owner = tenant.team.memberships.get().user
        principal = Principal(user=owner, team=tenant.team, channel=Channel.API)
        for sandbox_id, where in sandboxes.items():
            if where == tenant.where:
                try:
                    services.delete_sandbox(principal, sandbox_id)
                except Exception as exc:  # reported; the leftovers check says what stayed
                    problems.append(f"delete {sandbox_id}: {exc}")
    if not removal.wait_for_removals():
        problems.append("a sandbox removal was still running after 60 s")
    report = reconcile([tenant.host for tenant in layout.tenants], grace=0)
    return problems + report.errors
