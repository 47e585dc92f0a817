"""python manage.py mcp --api-key KEY (or SANDHUB_API_KEY): the MCP tools over stdio.

For MCP clients that start a local process instead of calling the web server. The key is
checked at start (an invalid one exits with an error) and again on every call, so revoking
it, or removing its user from the team, stops a running server from doing anything more.
stdout carries the protocol only; logs go to stderr.
"""

from __future__ import annotations

import os

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from mcp_bridge import identity, tracing
from mcp_bridge.server import build_server
from tenants import apikeys
from tenants.models import Channel
from tenants.ratelimits import RateLimited


class Command(BaseCommand):
    help = "Serve the Sandhub MCP tools over stdio, acting with one API key."
    requires_system_checks: list[str] = []  # keep start-up quick; nothing may touch stdout

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--api-key",
            default=None,
            help="the API key to act with (default: the SANDHUB_API_KEY environment variable)",
        )

    def handle(self, *args, **options) -> None:
        raw = options["api_key"] or os.environ.get("SANDHUB_API_KEY", "")
        if not raw:
            raise CommandError("no API key: pass --api-key KEY or set SANDHUB_API_KEY")
        try:
            key = apikeys.authenticate(raw, channel=Channel.MCP)
        except RateLimited as exc:
            raise CommandError(exc.message) from exc
        if key is None:
            raise CommandError(
                "invalid API key: it is unknown, revoked or expired, or its user is no longer "
                "a member of its team (create one with manage.py create_api_key)"
            )
        apikeys.touch(key, None)
        identity.use_process_key(raw.strip())
        self.stderr.write(
            f"Sandhub MCP over stdio as {key.user} in team {key.team.slug} "
            f"(key shk_{key.prefix}, scopes {','.join(key.scopes)})"
        )
        if settings.SANDHUB_MCP_TRACING:
            tracing.start_exporting()
        build_server().run(transport="stdio", show_banner=False)
