"""The options of `sandhub mcp`, and what it writes to stderr about what it forwards.

FastMCP logs every log notification a server sends its client on the
`fastmcp.server.context.to_client` logger, relabelled DEBUG; the proxy in `sandhub mcp` sends
one for every line a forwarded command prints, so an agent's MCP client (Claude Code keeps
the server's stderr) would get a DEBUG line per line of output. They are off unless asked for
with `--verbose` or SANDHUB_DEBUG=1; the notifications themselves reach the agent either way.
"""

from __future__ import annotations

import argparse
import logging
import os
import warnings
from collections.abc import Sequence

DEBUG_ENV = "SANDHUB_DEBUG"
_TO_CLIENT_LOGGER = "fastmcp.server.context.to_client"


def wants_debug(verbose: bool) -> bool:
    return verbose or os.environ.get(DEBUG_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def set_forwarded_logging(debug: bool) -> None:
    logging.getLogger(_TO_CLIENT_LOGGER).setLevel(logging.DEBUG if debug else logging.CRITICAL + 1)
    if not debug:
        # The MCP SDK warns on the first log notification sent on the 2026-07-28 protocol's
        # deprecation of logging; Claude Code speaks the handshake era, which still has it.
        warnings.filterwarnings("ignore", message="The logging capability is deprecated")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="sandhub mcp",
        description="Serve the Sandhub MCP tools over stdio, plus local file tools limited to "
        "the --root directories.",
    )
    parser.add_argument(
        "--root",
        action="append",
        default=[],
        metavar="DIR",
        help="a local directory the tools may read and write, with everything under it "
        "(repeatable; default: the current directory)",
    )
    parser.add_argument(
        "--verbose",
        action="store_true",
        help=f"log every notification forwarded to the agent on stderr (or {DEBUG_ENV}=1)",
    )
    return parser.parse_args(argv)
