"""The counters and histograms, and the one call each place that records makes.

prometheus_client picks its storage when it is first imported: with PROMETHEUS_MULTIPROC_DIR
set (scripts/web.sh and run.sh set it), every process writes its values to files of its own
in that directory and a scrape sums them (platform_site/metrics/exposition.py); without, they
live in this process. Only counters and histograms are recorded here: they sum across
processes as they should. Gauges of state (sandboxes, pools, queue) are read from the
database once per scrape instead, never per process.

Labels take a few known values each (never a tenant's name, a command, a file or a key): a
series per value costs every scrape, and a label fed by a client could grow without end.
"""

from __future__ import annotations

import os

from prometheus_client import CollectorRegistry, Counter, Histogram

# The instruments' own registry: the default one also holds this process's CPU and memory
# collectors, which in multiprocess mode would describe only the process that answers.
REGISTRY = CollectorRegistry(auto_describe=False)

# Seconds: from a fast page or tool call to an hour-long command.
_FAST = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_COMMANDS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)

HTTP_REQUESTS = Counter(
    "sandhub_http_requests",
    "HTTP requests answered, by method class (read/write/other), route group and status class.",
    ["method", "route", "status"],
    registry=REGISTRY,
)
HTTP_DURATION = Histogram(
    "sandhub_http_request_duration_seconds",
    "Time from a request's arrival to the end of its answer, by route group.",
    ["route"],
    buckets=_FAST,
    registry=REGISTRY,
)
MCP_CALLS = Counter(
    "sandhub_mcp_tool_calls",
    "MCP tool calls by tool and outcome (ok, tool_error, refused, exception).",
    ["tool", "outcome"],
    registry=REGISTRY,
)
MCP_DURATION = Histogram(
    "sandhub_mcp_tool_call_duration_seconds",
    "Time an MCP tool call took in the server, by tool.",
    ["tool"],
    buckets=_FAST,
    registry=REGISTRY,
)
COMMAND_DURATION = Histogram(
    "sandhub_command_duration_seconds",
    "Commands run in sandboxes (run_command, run_python, install_packages, sessions), by "
    "backend kind and final status (succeeded, failed, timed_out, error).",
    ["backend", "outcome"],
    buckets=_COMMANDS,
    registry=REGISTRY,
)

READS = frozenset({"GET", "HEAD", "OPTIONS"})
WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def multiprocess_dir() -> str | None:
    """The directory processes share their values through, when multiprocess mode is on."""
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None


def method_class(method: str) -> str:
    if method in READS:
        return "read"
    return "write" if method in WRITES else "other"


def status_class(status: int | None) -> str:
    """2xx, 4xx, ...; "none" when the app ended without answering (a client gone, a crash)."""
    if status is None or not 100 <= status <= 599:
        return "none"
    return f"{status // 100}xx"


def http_request(method: str, route: str, status: int | None, seconds: float) -> None:
    HTTP_REQUESTS.labels(method_class(method), route, status_class(status)).inc()
    HTTP_DURATION.labels(route).observe(seconds)


def mcp_call(tool: str, outcome: str, seconds: float) -> None:
    MCP_CALLS.labels(tool, outcome).inc()
    MCP_DURATION.labels(tool).observe(seconds)


def command_finished(backend: str, outcome: str, seconds: float) -> None:
    """One command that ran (or that its backend could not run: outcome "error")."""
    COMMAND_DURATION.labels(backend or "none", outcome).observe(max(seconds, 0.0))
