"""The checks after a run of the load (each an assertion whose message lists the offenders)
and the figures of the run. Not a test module."""

from __future__ import annotations

import statistics
import subprocess
import time
from collections import Counter, defaultdict
from typing import Any

from hosts.backends.docker.names import LABEL_SANDBOX, NAME_PREFIX
from hosts.backends.ssh import layout as ssh_layout
from sandboxes.models import CommandExecution
from tests.cluster.faults import Fault
from tests.cluster.layout import Layout
from tests.cluster.load import CallRecord
from tests.cluster.scenario import OPEN_STATUSES, TAG, RunResult

FAULT_WINDOW = 15.0  # seconds after a fault ends in which a failure is put down to it
FAULT_LEAD = 0.5  # clock slack: a failure this long before a fault is put down to it


def fault_of(result: RunResult, at: float) -> str:
    """The fault a failure at `at` (when the call failed) is put down to: the latest fault
    begun by then whose window is still open ("none" outside every window)."""
    begun = [f for f in result.faults if f.started - FAULT_LEAD <= at <= f.ended + FAULT_WINDOW]
    return max(begun, key=lambda f: f.started).name if begun else "none"


def open_history(sandbox_ids: list[str]) -> list[str]:
    rows = CommandExecution.objects.filter(
        sandbox__public_id__in=sandbox_ids, status__in=OPEN_STATUSES
    ).values_list("pk", "status", "command")
    return [f"#{pk} {status} {command[:40]!r}" for pk, status, command in rows]


def wait_history_final(result: RunResult, deadline: float) -> list[str]:
    """The rows still queued/running at `deadline` (monotonic), polled until then."""
    while True:
        left = open_history(list(result.sandboxes))
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.5)


def missing_rows(result: RunResult) -> list[str]:
    """Tags of commands the platform accepted (the call answered) with no history row."""
    accepted = {r.tag for r in result.records if r.ok and r.tag}
    commands = CommandExecution.objects.filter(sandbox__public_id__in=list(result.sandboxes))
    found = {m[0] for c in commands.values_list("command", flat=True) if (m := TAG.search(c))}
    return sorted(accepted - found)


def check_history_final(result: RunResult, seconds_after_load: float = 30.0) -> None:
    missing = missing_rows(result)
    assert not missing, f"accepted commands with no history row: {missing[:20]}"
    left = wait_history_final(result, result.ended + seconds_after_load)
    assert not left, (
        f"{len(left)} command(s) still queued/running {seconds_after_load:g} s after the "
        f"load: {left[:20]}"
    )


def check_killed_web_rows_closed(result: RunResult, seconds: float) -> None:
    """The commands in flight on the killed web process closed within `seconds` of its
    death (a liveness lease per web process; the sweep's timeout-plus-grace takes minutes)."""
    watch = result.killed_web_rows
    closed = watch.closed_after
    assert closed is not None and closed <= seconds, (
        f"of {len(watch.open_at_kill)} command(s) in flight on the killed web process, "
        f"{watch.still_open or 'none'} still open after the watch; closed after {closed} s, "
        f"expected within {seconds:g} s"
    )


def started_while_down(result: RunResult, record: CallRecord) -> bool:
    """Whether the call started while a fault held its part down (the second engine between
    its stop and its first answer, say): such a call fails with a clear error, as any call
    to a stopped engine does, and says nothing about the client's recovery."""
    return any(f.started <= record.start <= f.ended for f in result.faults if not f.skipped)


def failures_by_client_and_fault(result: RunResult) -> dict[int, Counter[str]]:
    """Failed calls per client and fault, but for calls begun while the fault's part was
    down (started_while_down)."""
    counts: dict[int, Counter[str]] = defaultdict(Counter)
    for record in result.records:
        if not record.ok and not started_while_down(result, record):
            counts[record.client][fault_of(result, record.failed_at)] += 1
    return counts


def check_clients_recovered(result: RunResult) -> None:
    """At most one failed call per client per fault (calls begun while the fault's part was
    down aside: each fails clearly), none without a fault, and every client carried on: a
    successful call after the last fault."""
    offenders = [
        f"client {client}: {count} failed call(s) in '{fault}'"
        for client, by_fault in failures_by_client_and_fault(result).items()
        for fault, count in by_fault.items()
        if count > 1 or fault == "none"
    ]
    last = max((f.ended for f in result.faults), default=result.started)
    stalled = [
        s.index for s in result.states if not any(r.ok and r.start > last for r in s.records)
    ]
    assert not offenders and not stalled, (
        f"failed calls beyond one per fault: {offenders[:20]}; "
        f"clients with no successful call after the last fault: {stalled}; "
        f"their failed calls: {failed_calls_of(result, offenders)}; "
        f"errors: {error_samples(result)}"
    )


def failed_calls_of(result: RunResult, offenders: list[str]) -> list[str]:
    """Each offending client's failed calls: when (seconds into the load), where, what."""
    clients = {int(line.split()[1].rstrip(":")) for line in offenders}
    return [
        f"client {r.client} +{r.start - result.started:.1f}..{r.failed_at - result.started:.1f}s"
        f"{' (begun while down)' if started_while_down(result, r) else ''} {r.kind} on "
        f"web{r.web}: {r.error[:200]}"
        for r in result.records
        if not r.ok and r.client in clients
    ]


def error_samples(result: RunResult, limit: int = 8) -> list[str]:
    seen: dict[str, str] = {}
    for record in result.records:
        if not record.ok:
            seen.setdefault(record.error[:160], f"{record.kind} on web{record.web}")
    return [f"{where}: {error}" for error, where in list(seen.items())[:limit]]


def check_jobs_ended(result: RunResult) -> None:
    """Every background job ended with its output, or with a clear error."""
    offenders = []
    for state in result.states:
        for job in state.jobs:
            if job.status == "running":
                offenders.append(f"job {job.task_id} of client {state.index} still running")
            elif job.status == "succeeded" and job.tag not in job.output:
                offenders.append(
                    f"job {job.task_id} in {job.sandbox_id} succeeded without its output: "
                    f"{job.output[-300:]!r}; its row: {job_row(job.task_id)}"
                )
            elif job.status != "succeeded" and not job.error.strip():
                offenders.append(f"job {job.task_id} ended {job.status} with no error message")
    assert not offenders, offenders[:20]


def job_row(command_id: int) -> str:
    row = (
        CommandExecution.objects.filter(pk=command_id)
        .values(
            "status",
            "exit_code",
            "stdout",
            "error_message",
            "background_state",
            "sandbox__host__name",
        )
        .first()
    )
    return repr(row)


def check_placement(result: RunResult, placed: dict[str, str], layout: Layout) -> None:
    expected = {tenant.host.name for tenant in layout.tenants}
    assert set(placed.values()) == expected, (
        f"sandboxes on {sorted(set(placed.values()))}, expected every host {sorted(expected)}"
    )


def leftovers(layout: Layout, sandbox_ids: set[str]) -> list[str]:
    """Containers, volumes, networks (both engines) and Unix users of these sandboxes."""
    found = []
    for name, engine in layout.engines.items():
        client = engine.client()
        try:
            for container in client.containers.list(all=True):
                if container.labels.get(LABEL_SANDBOX) in sandbox_ids:
                    found.append(f"{name}: container {container.name}")
            for network in client.networks.list():
                if network.name.removeprefix(NAME_PREFIX) in sandbox_ids:
                    found.append(f"{name}: network {network.name}")
            for volume in client.volumes.list():
                if volume.name.removeprefix(NAME_PREFIX) in sandbox_ids:
                    found.append(f"{name}: volume {volume.name}")
        finally:
            client.close()
    passwd = subprocess.run(["getent", "passwd"], capture_output=True, text=True).stdout
    for line in passwd.splitlines():
        user = line.split(":")[0]
        if ssh_layout.sandbox_id_of_user(user) in sandbox_ids:
            found.append(f"ssh: Unix user {user}")
    return found


def check_no_leftovers(layout: Layout, sandbox_ids: set[str]) -> None:
    left = leftovers(layout, sandbox_ids)
    assert not left, f"left behind after delete and reconcile: {left}"


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(share * len(ordered)) - 1))]


def figures(result: RunResult) -> dict[str, Any]:
    """The run's summary: throughput, latency of a short command, errors, recovery."""
    seconds = max(result.ended - result.started, 1e-9)
    loaded = [r for r in result.records if result.started <= r.start <= result.ended]
    echoes = [r.seconds for r in loaded if r.ok and r.kind == "echo"]
    by_web = Counter(f"web{r.web}" for r in loaded)
    errors_kind = Counter(r.error.split(":")[0] for r in result.records if not r.ok)
    errors_fault = Counter(fault_of(result, r.failed_at) for r in result.records if not r.ok)
    watch = result.killed_web_rows
    return {
        "seconds": round(seconds, 1),
        "clients": len(result.states),
        "calls": len(loaded),
        "calls_per_second": round(len(loaded) / seconds, 1),
        "calls_per_second_by_web": {w: round(n / seconds, 1) for w, n in sorted(by_web.items())},
        "echo_ms": _latency(echoes),
        "errors_by_kind": dict(errors_kind),
        "errors_by_fault": dict(errors_fault),
        "error_samples": error_samples(result),
        "killed_web_rows_open": len(watch.open_at_kill),
        "killed_web_rows_closed_after_s": (
            None if watch.closed_after is None else round(watch.closed_after, 1)
        ),
        "killed_web_rows_still_open": len(watch.still_open),
        "queue_depth_max": result.queue_depth_max,
        "jobs": sum(len(s.jobs) for s in result.states),
        "reconnects": sum(s.reconnects for s in result.states),
        "faults": [_fault_line(f, result.started) for f in result.faults],
    }


def _latency(values: list[float]) -> dict[str, float | int]:
    if not values:
        return {"n": 0}
    return {
        "n": len(values),
        "p50": round(statistics.median(values) * 1000, 1),
        "p90": round(percentile(values, 0.9) * 1000, 1),
        "p99": round(percentile(values, 0.99) * 1000, 1),
    }


def _fault_line(fault: Fault, started: float) -> str:
    if fault.skipped:
        return f"{fault.name}: skipped ({fault.skipped})"
    shown = {k: v for k, v in fault.notes.items() if k != "killed_at"}
    notes = f" {shown}" if shown else ""
    at = fault.started - started
    return f"{fault.name} at {at:.1f} s, took {fault.ended - fault.started:.1f} s{notes}"
