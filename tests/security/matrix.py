"""The stage of the tenancy matrix (test_matrix.py; its fixtures: tests/security/conftest.py):
who acts, the placeholders of the cases, the scene of two teams on the in-memory backend or
on the real Docker engine with a record of everything a refused request must leave alone,
and the ORM from inside an MCP conversation. Not a test module."""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import hashlib
import io
import json
import os
import secrets
import stat
import tarfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import docker
from django.contrib.auth import get_user_model
from django.db import connections
from fastmcp import Client
from fastmcp.client.transports import StreamableHttpTransport

from sandboxes import services
from sandboxes.models import AccessLink, CommandExecution, Sandbox, Snapshot, Terminal
from sandboxes.models.egress import EgressSecret
from tenants import apikeys
from tenants.models import ApiKey, McpSession, Membership, Role, Team
from tenants.principal import Principal
from tests.fakes import FakeBackend

MATRIX_INSTANCE = "security-matrix"  # label of this module's containers: removed whatever happens
# Who acts from team A: each role with a read-write key, and the owner with a read-only key.
ACTORS = {
    "owner": (Role.OWNER, "read,write"),
    "admin": (Role.ADMIN, "read,write"),
    "member": (Role.MEMBER, "read,write"),
    "viewer": (Role.VIEWER, "read,write"),
    "read-only": (Role.OWNER, "read"),
}
# Placeholders in the cases, replaced by real ids, or by made-up ones for the comparison.
B_SB, B_CMD, B_JOB, A_SB, A_JOB = "<B_SB>", "<B_CMD>", "<B_JOB>", "<A_SB>", "<A_JOB>"
B_LINK = "<B_LINK>"  # a file link of team B's sandbox (its id: lnk_...)
B_SNAP = "<B_SNAP>"  # a snapshot of team B's sandbox (its id: snap_...)
B_TERM = "<B_TERM>"  # a terminal of team B's sandbox (its id: tm-...)
B_SECRET = "<B_SECRET>"  # a secret of team B (egress; its id: a number)
GHOST = {
    B_SB: "sb_0000ghost000",
    B_CMD: 2**62 + 1,
    B_JOB: 2**62 + 2,
    B_LINK: "lnk_0000ghost000",
    B_SNAP: "snap_0000ghost000",
    B_TERM: "tm-0000ghost000000000000000000000",
    B_SECRET: 2**62 + 3,
}
ENGINES = ("team B", "team A")
BACKENDS = {"fake": "tests.fakes.FakeBackend", "docker": "hosts.backends.docker.DockerBackend"}
# Columns that change when a key is merely used: every request touches its own key (and a
# session's expiry moves as the session is used).
VOLATILE = {ApiKey: {"last_used_at", "last_used_address"}, McpSession: {"expires_at"}}
TABLES: tuple[type[Any], ...] = (
    Sandbox,
    CommandExecution,
    ApiKey,
    Membership,
    AccessLink,
    McpSession,
    Snapshot,
    Terminal,
    EgressSecret,
)
# The MCP session every matrix client presents, so the selection is on the record too.
SESSION = "security-matrix-session"
# The same from inside the container, for an engine whose volumes are not on this machine.
LIST_WORKSPACE = (
    "find /workspace -xdev -printf '%y %m %s %T@ %p\\n' | sort; "
    "find /workspace -xdev -type f -exec sha256sum {} + | sort"
)


def _workspace(container: Any) -> str:
    """Every entry of the sandbox's /workspace (mode, owner, size, mtime, path) and each
    regular file's sha256: read from the volume's directory on this machine (a local engine;
    an exec would cost ~0.2 s a look), else from inside the container."""
    mounts: list[dict[str, Any]] = container.attrs["Mounts"]
    mount = next((m for m in mounts if m["Destination"] == "/workspace"), {})
    root = mount.get("Source", "")
    if not root or not os.access(root, os.R_OK | os.X_OK):
        return container.exec_run(["sh", "-c", LIST_WORKSPACE], user="0").output.decode()
    lines = []

    def unreadable(error: OSError) -> None:  # a silent gap would pass for "unchanged"
        raise error

    for directory, dirs, files in os.walk(root, onerror=unreadable):
        for path in [directory] + [os.path.join(directory, name) for name in dirs + files]:
            info = os.lstat(path)
            digest = ""
            if stat.S_ISREG(info.st_mode):
                with open(path, "rb") as handle:
                    digest = hashlib.file_digest(handle, "sha256").hexdigest()
            name = os.path.relpath(path, root)
            lines.append(
                f"{info.st_mode:o} {info.st_uid} {info.st_size} {info.st_mtime_ns} {name} {digest}"
            )
    return "\n".join(sorted(set(lines)))


def engines_named(template: Any, *, own: bool = False) -> tuple[str, ...]:
    """Whose sandbox on the engine a case's ids name (team A's instead of B's with `own`)."""
    text = json.dumps(template)
    named = (
        {"team A" if own else "team B"}
        if any(p in text for p in (B_SB, B_CMD, B_JOB, B_LINK, B_SNAP, B_TERM))
        else set()
    )
    if A_SB in text or A_JOB in text:
        named.add("team A")
    return tuple(sorted(named, reverse=True)) or ENGINES


@dataclass
class Scene:
    """Team A's keys, team B's (and A's own) objects, and the state nothing may change."""

    backend: str
    keys: dict[str, str]  # actor -> plaintext key
    key_rows: dict[str, ApiKey]
    team_a: Team
    team_b: Team
    foreign: dict[str, Any]  # team B's sandbox, command, background command
    own: dict[str, Any]  # team A's
    principals: dict[str, Principal]
    baseline: dict[str, Any] = field(default_factory=dict)

    def principal(self, actor: str) -> Principal:
        return self.principals[actor]

    def state(self, engines: tuple[str, ...] = ENGINES) -> dict[str, Any]:
        """The rows of the tables a request could change, and the named teams' sandboxes on
        the engine (AuditLog is left out: refusals are recorded there)."""
        rows = {}
        for model in TABLES:
            skip = VOLATILE.get(model, set())
            names = [f.attname for f in model._meta.concrete_fields if f.name not in skip]
            rows[model.__name__] = {row["id"]: row for row in model.objects.values(*names)}
        containers = {"team B": self.foreign["container"], "team A": self.own["container"]}
        return {
            "rows": rows,
            "engine": {who: self._engine_state(containers[who]) for who in engines},
        }

    def _engine_state(self, container_id: str) -> str:
        if self.backend == "fake":
            box = FakeBackend.sandboxes.get(container_id)
            if box is None:
                return "gone"
            jobs = {job: record["cancelled_after"] for job, record in box.get("jobs", {}).items()}
            return repr((box["running"], sorted(box["files"].items()), sorted(jobs.items())))
        client = docker.from_env()
        try:
            container = client.containers.get(container_id)
            status = {**container.attrs["State"], "Restarts": container.attrs["RestartCount"]}
            processes = container.top(ps_args="-o pid,ppid,comm")["Processes"]  # the engine's ps
            listing = _workspace(container)
        except docker.errors.NotFound:
            return "gone"
        finally:
            client.close()
        keep = ("Status", "Running", "Pid", "StartedAt", "Restarts", "OOMKilled")
        facts = ({k: status[k] for k in keep}, sorted(map(tuple, processes)))
        return f"{facts!r}\n{listing}"

    def changes(
        self,
        allowed: Callable[[str, Any, Any], bool] | None = None,
        engines: tuple[str, ...] = ENGINES,
    ) -> list[str]:
        """What differs from the baseline, which then becomes the new one (so one bad case
        does not fail every case after it). `allowed(table, old_row, new_row)` says which
        row changes a case may make (a creation by someone allowed to create); rows are
        dicts of column values, None for a row that is not there. `engines`: the teams whose
        sandbox on the engine is looked at."""
        now, before = self.state(engines), self.baseline
        self.baseline = {"rows": now["rows"], "engine": {**before["engine"], **now["engine"]}}
        found = []
        for table, rows in now["rows"].items():
            old = before["rows"][table]
            for pk in sorted(set(rows) | set(old)):
                if rows.get(pk) == old.get(pk):
                    continue
                if allowed is None or not allowed(table, old.get(pk), rows.get(pk)):
                    found.append(f"{table} {pk}: {old.get(pk)} -> {rows.get(pk)}")
        for who, text in now["engine"].items():
            if text != before["engine"][who]:
                diff = difflib.unified_diff(
                    before["engine"][who].splitlines(), text.splitlines(), lineterm=""
                )
                found.append(f"{who}'s sandbox on the engine changed:\n" + "\n".join(diff))
        if found:
            self._heal()
        return found

    def _heal(self) -> None:
        """After a case that broke something: a sandbox that is no longer running is made
        again, so the cases after it still have something to find (and to leak)."""
        for objects, actor, secret in (
            (self.foreign, "bob", "team B's secret\n"),
            (self.own, "owner", "team A's own\n"),
        ):
            if not Sandbox.objects.filter(public_id=objects["sandbox"], status="running").exists():
                objects.update(populate(self.principal(actor), secret))
        self.baseline = self.state()

    def ids(self, *, ghost: bool = False, own: bool = False) -> dict[str, Any]:
        """What the placeholders stand for: team B's ids (or made-up ones: `ghost`), or team
        A's own in their place (`own`)."""
        ids = {
            B_SB: self.foreign["sandbox"],
            B_CMD: self.foreign["command"],
            B_JOB: self.foreign["job"],
            B_LINK: self.foreign["link"],
            B_SNAP: self.foreign["snapshot"],
            B_TERM: self.foreign["terminal"],
            B_SECRET: self.foreign["secret"],
            A_SB: self.own["sandbox"],
            A_JOB: self.own["job"],
        }
        if own:
            ids.update(
                {
                    B_SB: self.own["sandbox"],
                    B_JOB: self.own["job"],
                    B_LINK: self.own["link"],
                    B_SNAP: self.own["snapshot"],
                    B_TERM: self.own["terminal"],
                    B_SECRET: self.own["secret"],
                }
            )
        return {**ids, **GHOST} if ghost else ids

    def fill(self, template: Any, **which: bool) -> Any:
        """The template with each placeholder (a whole value) replaced, see ids()."""
        ids = self.ids(**which)

        def replace(value: Any) -> Any:
            if isinstance(value, dict):
                return {k: replace(v) for k, v in value.items()}
            if isinstance(value, list):
                return [replace(v) for v in value]
            return ids.get(value, value) if isinstance(value, str) else value

        return replace(template)

    def unghost(self, text: str) -> str:
        """A made-up id's answer, with the made-up ids written as the real ones."""
        real = self.ids()
        for placeholder, ghost in GHOST.items():
            text = text.replace(str(ghost), str(real[placeholder]))
        return text

    def shows_team_b(self, text: str) -> bool:
        return any(self.foreign[k] in text for k in ("sandbox", "snapshot")) or (
            "team B's secret" in text
        )

    def team_a_ids(self) -> set[str]:
        return set(Sandbox.objects.filter(team=self.team_a).values_list("public_id", flat=True))

    def team_a_snapshots(self) -> set[str]:
        return set(Snapshot.objects.filter(team=self.team_a).values_list("public_id", flat=True))

    def team_a_live(self) -> int:
        return Sandbox.objects.live().filter(team=self.team_a).count()

    def select(self, actor: str, sandbox_id: str) -> None:
        """Set the selected sandbox of the key's session SESSION, as MCP's select_sandbox
        would (or forge it)."""
        apikeys.select_in_session(self.key_rows[actor].pk, SESSION, sandbox_id)

    def creation_by(self, actor: str) -> Callable[[str, Any, Any], bool]:
        """Row changes a creation in team A may make: new sandboxes of team A, their commands,
        and the acting key's session's selection (MCP's create_sandbox selects what it made)."""
        team_a, key = self.team_a.pk, self.key_rows[actor].pk

        def allowed(table: str, old: Any, new: Any) -> bool:
            if table == "McpSession" and new is not None and new["key_id"] == key:
                return (
                    not new["selected_sandbox"]
                    or Sandbox.objects.filter(
                        public_id=new["selected_sandbox"], team_id=team_a
                    ).exists()
                )
            if old is not None or table not in ("Sandbox", "CommandExecution"):
                return False
            if table == "Sandbox":
                return new["team_id"] == team_a
            return Sandbox.objects.filter(pk=new["sandbox_id"], team_id=team_a).exists()

        return allowed

    def created_since(self) -> Callable[[], list[str]]:
        """A function listing the sandboxes made from now on."""
        before = set(Sandbox.objects.values_list("public_id", flat=True))
        return lambda: sorted(set(Sandbox.objects.values_list("public_id", flat=True)) - before)

    def undo_creations(self, actor: str, created: Callable[[], list[str]]) -> None:
        """Back to the baseline after a creation: what was made deleted, the key's selection
        of it dropped (nothing to do when nothing was made)."""
        made = created()
        for sandbox_id in made:
            if Sandbox.objects.get(public_id=sandbox_id).status != "deleted":
                services.delete_sandbox(self.principal("owner"), sandbox_id)
        if made:
            self.select(actor, "")
            self.baseline = self.state()


def pwned_tar() -> bytes:
    """A tar a sync upload would write (a case's body): pwned.txt."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as archive:
        archive.addfile(tarfile.TarInfo("pwned.txt"), None)  # an empty file will do
    return out.getvalue()


def in_session(server: str, key: str) -> Client:
    """An MCP client in the session SESSION, whose selection the scene records and forges."""
    headers = {"mcp-session-id": SESSION}
    return Client(StreamableHttpTransport(f"{server}/mcp/", auth=key, headers=headers))


def make_user(username: str, team: Team, role: str) -> Any:
    user = get_user_model().objects.create(username=username)
    Membership.objects.create(user=user, team=team, role=role)
    return user


def populate(principal: Principal, secret: str) -> dict[str, Any]:
    """A sandbox with a file (and a link to it), a finished command, a silent background
    command and a snapshot."""
    sandbox = services.create_sandbox(principal, name=f"{principal.team} sandbox", memory_mb=256)
    services.write_file(principal, sandbox.id, "secret.txt", secret)
    link = services.create_file_link(principal, sandbox.id, "secret.txt")
    command = services.run_command(principal, sandbox.id, "echo done")
    job = services.start_background(principal, sandbox.id, "sleep 900")
    container = Sandbox.objects.get(public_id=sandbox.id).backend_state["container_id"]
    name = f"{principal.team} snapshot {secrets.token_hex(3)}"  # a healed scene takes another
    snapshot = services.snapshot_sandbox(principal, sandbox.id, name)
    terminal = services.open_terminal(principal, sandbox.id)
    services.run_command(principal, sandbox.id, "true", session="main")  # a shell session
    bound = services.add_secret(  # its value: the text no answer may show
        principal,
        name=f"MATRIX_{secrets.token_hex(3)}",
        hosts=["api.example"],
        value=secret.strip(),
    )
    return {
        "secret": bound.id,
        "terminal": terminal.id,
        "sandbox": sandbox.id,
        "command": command.id,
        "job": job.id,
        "link": link.link_id,
        "container": container,
        "snapshot": snapshot.id,
    }


def delete_all(*owners: Principal) -> None:
    for principal in owners:
        for snapshot in Snapshot.objects.live().filter(team=principal.team):
            with contextlib.suppress(Exception):
                services.delete_snapshot(principal, snapshot.public_id)
        for sandbox in Sandbox.objects.filter(team=principal.team).exclude(status="deleted"):
            with contextlib.suppress(Exception):
                services.delete_sandbox(principal, sandbox.public_id)


class Orm:
    """The ORM from inside an MCP conversation: one worker thread whose database connection
    lasts the conversation (a new connection for each look costs ~50 ms on PostgreSQL)."""

    def __init__(self) -> None:
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="matrix-orm")

    async def __call__(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        call = partial(fn, *args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(self.pool, call)

    def close(self) -> None:  # an open connection would keep PostgreSQL from dropping the db
        self.pool.submit(connections.close_all).result()
        self.pool.shutdown()
