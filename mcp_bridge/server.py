"""The Sandhub MCP server: one FastMCP instance with every tool, resource and prompt.

Built once per process: over HTTP with the API-key verifier (platform_site/asgi.py mounts
it at /mcp/), over stdio without one (manage.py mcp authenticates its own key).
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor

import fastmcp
from django.conf import settings
from fastmcp import FastMCP
from fastmcp.server.auth import AuthProvider
from starlette.middleware import Middleware

from mcp_bridge import (
    prompts,
    resources,
    tools_background,
    tools_commands,
    tools_files,
    tools_lifecycle,
    tools_links,
    tools_metrics,
    tools_network,
    tools_previews,
    tools_sandboxes,
    tools_sessions,
    tools_snapshots,
    tracing,
)
from mcp_bridge.argcheck import ArgumentCheck
from mcp_bridge.callmetrics import CallMetrics
from mcp_bridge.listing import DereferenceOnce
from mcp_bridge.refusals import RefusalAudit

INSTRUCTIONS = """\
Sandhub gives you isolated Linux sandboxes (python3, bash, git; files in /workspace) to run
code in. Typical use: create_sandbox (keep the id it returns), upload_files, run_command /
run_python / run_tests, read_file or download_files, then delete_sandbox. Pass sandbox_id to
every tool that acts on a sandbox: it may be omitted only in an MCP session that selected a
sandbox (create_sandbox or select_sandbox select it in the session; each session has its own
selection, and clients on the 2026-07-28 protocol have no session), and never for
delete_sandbox, pause_sandbox, stop_sandbox, stop_app and cancel_background. run_once does
create-run-delete in one call. Between working sessions, pause_sandbox (frozen, memory kept)
or stop_sandbox (files only) keeps a sandbox without it holding CPU; any later call resumes
it first (its result's resumed_seconds says how long that took), resume_sandbox ahead of time.
For long jobs (servers, builds) start_background returns a task id at once; follow it with
check_background, stop it with cancel_background. To run a web app and open it in a browser,
deploy_app starts it and returns its URL (get_preview_url for an app already running,
stop_app to stop it); previews work even without network. To hand a person a file, give
them get_file_link's URL (no login needed; it expires; list_links and revoke_link manage
them). snapshot_sandbox keeps a sandbox's files under a name (fork_sandbox branches one);
create_sandbox(snapshot_id=...) starts a new sandbox from a snapshot. Sandboxes have no
network unless created with one (network "allowlist" with `allow`, or "public", within your
team's policy); get_network_log lists what was refused. Errors say what to change.
"""


# FastMCP logs every notification it sends a client on this logger, at the notification's
# level: every line a command prints would be written to the platform's log (a tenant's
# output where the operator reads) and, through rich, cost the event loop a few ms per
# command. The notifications themselves still go out.
_TO_CLIENT_LOGGER = "fastmcp.server.context.to_client"


def build_server(auth: AuthProvider | None = None) -> FastMCP:
    logging.getLogger(_TO_CLIENT_LOGGER).setLevel(logging.CRITICAL + 1)
    # "off": FastMCP neither opens spans nor extracts trace context (settings.py says why).
    fastmcp.settings.telemetry_mode = "native" if settings.SANDHUB_MCP_TRACING else "off"
    mcp = FastMCP(
        "Sandhub",
        instructions=INSTRUCTIONS,
        auth=auth,
        # Only ToolError messages (the services' own, written for the caller) reach the
        # agent; anything unexpected is reported without internals and logged here.
        mask_error_details=True,
        on_duplicate="error",
        # Arguments are checked as JSON, strictly: `"timeout": true` is no number ("10" is
        # made 10 first, argcheck.py).
        strict_input_validation=True,
        # Schemas are inlined for clients that cannot follow $ref, once per tool, not per
        # listing (listing.py).
        dereference_schemas=False,
    )
    mcp.add_middleware(CallMetrics(mcp))  # outermost: counts every call as the agent sees it
    if settings.SANDHUB_MCP_TRACING:
        tracing.install(mcp)  # outside the audit: a refused call is a span too
    mcp.add_middleware(DereferenceOnce())
    # Every call refused before a service ran (bad arguments, unknown tool) leaves a row.
    mcp.add_middleware(RefusalAudit())
    # Inside the audit, so its row has the short message: "5" taken as 5, errors one line each.
    mcp.add_middleware(ArgumentCheck(mcp))
    mcp.add_middleware(prompts.PromptArguments(mcp))  # a missing argument named
    tools_sandboxes.register(mcp)
    tools_commands.register(mcp)
    tools_background.register(mcp)
    tools_files.register(mcp)
    tools_previews.register(mcp)
    tools_links.register(mcp)
    tools_lifecycle.register(mcp)
    tools_snapshots.register(mcp)
    tools_metrics.register(mcp)
    tools_sessions.register(mcp)
    tools_network.register(mcp)
    resources.register(mcp)
    prompts.register(mcp)
    _serve_input_schemas(mcp)
    return mcp


def _serve_input_schemas(mcp: FastMCP) -> None:
    """Give the MCP SDK each tool's input schema by name, read once here.

    On the 2026-07-28 protocol the SDK checks every tools/call's Mcp-Param-* headers against
    the tool's schema before dispatching; without this lookup it runs a whole tools/list for
    that, through FastMCP, which builds all 23 schemas anew: about 40% of the web process's
    CPU per command under load. The tools are fixed once registered, so their schemas are.
    """
    with ThreadPoolExecutor(max_workers=1) as pool:  # works whether or not a loop is running
        tools = pool.submit(asyncio.run, mcp.list_tools(run_middleware=False)).result()
    schemas = {tool.name: tool.to_mcp_tool().input_schema for tool in tools}
    mcp._mcp_server.get_tool_input_schema = schemas.get


def http_app(path: str = "/mcp/"):
    """The streamable-HTTP ASGI app at `path`, authenticated with API keys, stateless so any
    web process can answer any request (an MCP session's selected sandbox lives in the
    database: sessions.py hands the ids out, inside the key check). Its lifespan must be run
    by the outer ASGI app. The MCP SDK answers 413 to a request body over 4 MiB (made a JSON-RPC
    error that says what to do by bodylimit.py): larger files go through the REST API's
    streaming upload and download."""
    from mcp_bridge.auth import ApiKeyVerifier
    from mcp_bridge.sessions import McpSessions

    if settings.SANDHUB_MCP_TRACING:
        tracing.start_exporting()
    return build_server(auth=ApiKeyVerifier()).http_app(
        path=path, stateless_http=True, middleware=[Middleware(McpSessions)]
    )
