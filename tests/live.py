"""Helpers of the live-server fixtures (`live_db`, `world`, `shared_sandbox`, `asgi_server`
in tests/conftest.py): the world each module gets, MCP clients, and the test database as a
URL for a subprocess. Not a test module.

The live server (uvicorn in a thread) and the stdio server (a subprocess) must see the test
database, so the modules that use them do not run each test in a transaction: `live_db` opens
database access for the whole module, the world is committed once, and the database is
flushed when the module ends. Sandboxes are few and shared, since each costs a container.
"""

from __future__ import annotations

import asyncio
import os
import socket
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection, connections
from django.utils import timezone
from fastmcp import Client

from hosts.models import Host, Image
from tenants import apikeys
from tenants.models import ApiKey, Channel, Membership, Role, Team
from tenants.principal import Principal

ROOT = Path(__file__).resolve().parent.parent

CALC = "def add(a, b):\n    return a + b\n"
TEST_CALC = (
    "from calc import add\n\n\n"
    "def test_add():\n    assert add(1, 2) == 3\n\n\n"
    "def test_add_negative():\n    assert add(-1, -1) == -2\n\n\n"
    "def test_add_wrong():\n    assert add(2, 2) == 5, 'two and two make four'\n"
)
EXPECTED_TOOLS = {
    "list_hosts",
    "create_sandbox",
    "list_sandboxes",
    "get_sandbox",
    "delete_sandbox",
    "select_sandbox",
    "get_active_sandbox",
    "run_command",
    "run_python",
    "install_packages",
    "start_background",
    "check_background",
    "cancel_background",
    "upload_files",
    "download_files",
    "list_files",
    "read_file",
    "write_file",
    "run_tests",
    "run_once",
    "deploy_app",
    "get_preview_url",
    "stop_app",
    "get_file_link",
    "list_links",
    "revoke_link",
    "pause_sandbox",
    "resume_sandbox",
    "stop_sandbox",
    "snapshot_sandbox",
    "list_snapshots",
    "delete_snapshot",
    "fork_sandbox",
    "get_sandbox_metrics",
    "get_network_log",
    "list_sessions",
    "close_session",
}


@dataclass
class World:
    team_a: Team
    team_b: Team
    alice: Any  # owner of A
    victor: Any  # viewer of A
    bob: Any  # member of B
    dave: Any  # member of A, removed from it by a test
    keys: dict[str, str] = field(default_factory=dict)  # name -> plaintext
    rows: dict[str, ApiKey] = field(default_factory=dict)

    def principal(self, user=None, channel: str = Channel.WEB) -> Principal:
        return Principal(user=user or self.alice, team=self.team_a, channel=channel)


def _user(username: str, team: Team, role: str):
    user = get_user_model().objects.create(username=username)
    Membership.objects.create(user=user, team=team, role=role)
    return user


def build_world() -> World:
    team_a = Team.objects.create(slug="alpha", name="Team Alpha", max_running_sandboxes=6)
    team_b = Team.objects.create(slug="beta", name="Team Beta")
    world = World(
        team_a=team_a,
        team_b=team_b,
        alice=_user("alice", team_a, Role.OWNER),
        victor=_user("victor", team_a, Role.VIEWER),
        bob=_user("bob", team_b, Role.MEMBER),
        dave=_user("dave", team_a, Role.MEMBER),
    )
    Image.objects.create(name="python", reference=settings.SANDHUB_SANDBOX_IMAGE, is_default=True)
    Host.objects.create(name="local", kind="docker", endpoint=settings.SANDHUB_DOCKER_URL)
    specs = {
        "alice": (world.alice, team_a, "read,write"),
        "alice_read": (world.alice, team_a, "read"),
        "victor": (world.victor, team_a, "read,write"),
        "bob": (world.bob, team_b, "read,write"),
        "dave": (world.dave, team_a, "read,write"),
        "expired": (world.alice, team_a, "read,write"),
        "revoked": (world.alice, team_a, "read,write"),
    }
    for name, (user, team, scopes) in specs.items():
        new = apikeys.create_key(user, team, name=name, scopes=scopes)
        world.keys[name], world.rows[name] = new.plaintext, new.key
    ApiKey.objects.filter(pk=world.rows["expired"].pk).update(
        expires_at=timezone.now() - timedelta(minutes=1)
    )
    apikeys.revoke(world.rows["revoked"])
    return world


# Taken at import, before any test database exists, to tell the two apart.
_REAL_DATABASE_NAME = str(settings.DATABASES["default"]["NAME"])


def on_test_database() -> bool:
    return str(connection.settings_dict["NAME"]) != _REAL_DATABASE_NAME


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def mcp(server: str, key: str | None, **kwargs) -> Client:
    """A fastmcp.Client on the live server's endpoint with this key."""
    return Client(f"{server}/mcp/", auth=key, **kwargs)


def run(coroutine):
    """Run an async MCP conversation from a synchronous test."""
    return asyncio.run(coroutine)


async def in_thread(fn, *args):
    """fn(*args) with the ORM, from inside a conversation, closing the thread's connection
    after (an open one would keep PostgreSQL from dropping the test database)."""

    def closing():
        try:
            return fn(*args)
        finally:
            connections.close_all()

    return await asyncio.to_thread(closing)


def database_url() -> str:
    """The test database as DATABASE_URL, for a subprocess (manage.py mcp)."""
    config = connection.settings_dict
    if config["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{config['NAME']}"
    user = quote(config.get("USER") or "", safe="")
    password = f":{quote(config['PASSWORD'], safe='')}" if config.get("PASSWORD") else ""
    credentials = f"{user}{password}@" if user else ""
    host = config.get("HOST") or "localhost"
    port = f":{config['PORT']}" if config.get("PORT") else ""
    return f"postgres://{credentials}{host}{port}/{config['NAME']}"


def subprocess_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "SANDHUB_API_KEY"}
    return {**env, "DATABASE_URL": database_url(), **extra}
