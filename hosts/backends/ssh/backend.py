"""SshBackend: sandboxes on a remote Linux machine reached over SSH (settings.SANDHUB_BACKENDS
"ssh"). An AgentFirstBackend (agentfirst.py: agent or per-command path, chosen once for every
kind) composed of the pieces of this package, as DockerBackend composes its own:

- connection / pool: one persistent, pinned, TCP_NODELAY connection per host per process;
- provision / layout: a directory per sandbox under the host's base directory, and its own
  Unix user where the login user may `sudo -n`;
- agent / tarstreams: the sandbox agent on an SSH channel (agent/link.py and agent/jobs.py
  do the rest, for every kind), run as the sandbox's
  user, for commands, files and background jobs; tar streams for uploads and downloads,
  and of chosen entries (the local client's sync);
- plain: an exec channel, the one primitive of the per-command path (fallback/) where the
  login user has no usable python3 (the agent is unavailable);
- ports: port streams (previews) without the agent: a direct-tcpip channel, on a host
  without per-sandbox users only;
- hostprobe / hostkeys: load, GPUs and facts in one round trip; the host key for an admin;
- suspend: pause, resume, stop and start of isolated sandboxes.
- snapshots: a sandbox's workspace kept on the host, moved between hosts as a tar stream.

The host is reached only once its key is pinned (Host.host_key_pinned, confirmed in admin);
the login user is the credential's username, its secret a password or a private key.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import IO, TYPE_CHECKING, Any

from django.conf import settings

from hosts.backends.agent.client import AgentUnavailable
from hosts.backends.agent.jobs import AgentJobs
from hosts.backends.agent.link import AgentLink
from hosts.backends.agentfirst import AgentFirstBackend
from hosts.backends.base import (
    BackendError,
    HostKey,
    ManagedResource,
    PortStream,
    ProbeResult,
    SandboxSpec,
    SnapshotTaken,
    Unsupported,
)
from hosts.backends.fallback.commands import PlainCommands
from hosts.backends.fallback.jobs import PlainJobs
from hosts.backends.ssh import (
    egress,
    hostkeys,
    hostprobe,
    layout,
    ports,
    provision,
    snapshots,
    suspend,
)
from hosts.backends.ssh.agent import MAX_AGENTS, SshAgentPlace
from hosts.backends.ssh.connection import SshConnection, SshTarget
from hosts.backends.ssh.hostprobe import HostFacts
from hosts.backends.ssh.plain import SshPlainExec
from hosts.backends.ssh.pool import pool
from hosts.backends.ssh.tarstreams import SshTars
from hosts.backends.ssh.usage import host_usage

if TYPE_CHECKING:
    from hosts.models import Host

DEFAULT_PORT = 22


def parse_endpoint(endpoint: str) -> tuple[str, int]:
    """ "address:port", "[v6]:port", or an address alone (port 22)."""
    text = endpoint.strip().removeprefix("ssh://").rstrip("/")
    if "@" in text:  # ssh://user@host: the user comes from the credential
        text = text.split("@", 1)[1]
    if text.startswith("["):
        address, _, rest = text[1:].partition("]")
        port_text = rest.removeprefix(":")
    elif text.count(":") == 1:
        address, port_text = text.split(":")
    else:
        address, port_text = text, ""
    try:
        port = int(port_text) if port_text else DEFAULT_PORT
    except ValueError:
        raise BackendError(f"SSH endpoint {endpoint!r} is not address:port") from None
    if not address or not 0 < port < 65536:
        raise BackendError(f"SSH endpoint {endpoint!r} is not address:port")
    return address, port


def target_for(host: Host) -> SshTarget:
    """How to reach the host: endpoint, the credential's user and secret, the pinned key."""
    address, port = parse_endpoint(host.endpoint)
    credential = host.credential
    if credential is None or not credential.username:
        raise BackendError(f"SSH host {host.name} needs a credential with a username")
    secret = credential.get_secret()
    keyed = credential.kind == credential.Kind.PRIVATE_KEY
    return SshTarget(
        address=address,
        port=port,
        username=credential.username,
        password=None if keyed else secret,
        private_key=secret if keyed else None,
        passphrase=credential.get_passphrase() if keyed else None,
        fingerprint=host.host_key_pinned or None,
        host_key_type=host.host_key_type or None,
    )


class SshBackend(AgentFirstBackend):
    kind = "ssh"

    def __init__(self, host: Host) -> None:
        super().__init__(host)
        self.target = target_for(host)
        self.base_dir = host.base_dir or layout.DEFAULT_BASE_DIR
        self.place = SshAgentPlace(self.connection)
        self.agents = AgentLink(self.place, max_agents=MAX_AGENTS)
        self.agent_jobs = AgentJobs(self.agents)
        self.plain = PlainCommands(SshPlainExec(self.connection), self.place)
        self.plain_jobs = PlainJobs(self.plain)
        self.tars = SshTars(self.agents, self.connection)
        self._facts: HostFacts | None = None

    def connection(self) -> SshConnection:
        return pool.get(self.target)

    def facts(self) -> HostFacts:
        """What the host allows (sudo, systemd, python3), read once per process."""
        if self._facts is None:
            self._facts = hostprobe.host_facts(self.connection())
        return self._facts

    def close(self) -> None:
        self.agents.close()
        pool.drop(self.target)

    # --- lifecycle ---------------------------------------------------------------------------
    def provision(self, spec: SandboxSpec) -> dict[str, Any]:
        return provision.provision(
            self.connection(),
            self.facts(),
            spec,
            self.base_dir,
            settings.SANDHUB_INSTANCE,
            egress_proxy=self.host.options.get(egress.OPTION),
        )

    def destroy(self, state: dict[str, Any]) -> None:
        self.agents.forget(state)  # its processes die with the sandbox's
        provision.destroy(self.connection(), state, base_dir=self.base_dir)

    def status(self, state: dict[str, Any]) -> str:
        return provision.status(self.connection(), state, base_dir=self.base_dir)

    def terminal_dir(self, state: dict[str, Any]) -> str:
        # An isolated sandbox's /tmp is its own; the others share the host's, where another
        # user could take the name first: their holders listen in the sandbox's own 0700
        # platform directory instead (outside the workspace too).
        if state.get("isolated"):
            return super().terminal_dir(state)
        return f"{state['meta']}/t"

    # Isolated sandboxes only (suspend.py): their cgroup is frozen, their processes ended
    # and their namespaces made again; others answer Unsupported, saying why.
    def pause(self, state: dict[str, Any]) -> None:
        suspend.pause(self.connection(), state)

    def resume(self, state: dict[str, Any]) -> None:
        suspend.resume(self.connection(), state)

    def stop(self, state: dict[str, Any]) -> None:
        suspend.halt(self.connection(), state)
        self.agents.forget(state)  # it ended with every other process of the sandbox

    def start(self, state: dict[str, Any]) -> None:
        self.agents.forget(state)
        suspend.restart(self.connection(), state)

    def command_argv(self, state: dict[str, Any], argv: list[str]) -> list[str]:
        """Arguments that are /workspace paths, as the host has them: the services pass paths
        as arguments of their own commands (read_file, say). /workspace does not exist on an
        SSH host; inside a shell command line nothing is rewritten (commands use relative
        paths, the working directory being the workspace, or $SANDHUB_WORKSPACE)."""
        return [
            layout.host_path(state, arg)
            if arg == layout.WORKSPACE or arg.startswith(layout.WORKSPACE + "/")
            else arg
            for arg in argv
        ]

    # --- files -------------------------------------------------------------------------------
    def put_files(
        self, state: dict[str, Any], dest_dir: str, tar_stream: bytes | IO[bytes]
    ) -> None:
        self.tars.put_files(state, dest_dir, tar_stream)

    def get_files(self, state: dict[str, Any], path: str) -> Iterator[bytes]:
        return self.tars.get_files(state, path)

    def get_entries(self, state: dict[str, Any], root: str, paths: list[str]) -> Iterator[bytes]:
        return self.tars.get_entries(state, root, paths)

    # --- ports -------------------------------------------------------------------------------
    def open_port_without_agent(
        self, state: dict[str, Any], port: int, timeout: float, why: AgentUnavailable
    ) -> PortStream:
        """A direct-tcpip channel, but only on a host whose sandboxes share the login user:
        with per-sandbox users, the port on the host's loopback may be another team's
        sandbox's, and nothing but the agent can tell."""
        if state.get("own_user") or self.facts().per_sandbox_users:
            raise Unsupported(
                f"previews on {self.connection().target.where} need python3 on the host: "
                "its sandboxes have users of their own, and only the sandbox agent can "
                f"tell whose listener a port is ({why})"
            )
        return ports.open_direct(self.connection(), port, timeout)

    def has_own_cgroup(self, state: dict[str, Any]) -> bool:
        return bool(state.get("isolated"))  # else its processes are in the login's cgroup

    def usage_outside(self, state: dict[str, Any]) -> dict[str, Any] | None:
        return host_usage(self.connection(), state)

    # --- host --------------------------------------------------------------------------------
    def probe(self) -> ProbeResult:
        result = hostprobe.probe(self.connection(), base_dir=self.base_dir)
        facts = hostprobe.facts_from_details(result.details)
        if facts is not None:
            self._facts = facts  # a host that gained sudo or python3 is seen at once
        return result

    def list_sandbox_ids(self) -> Iterable[str]:
        return [r.label_id for r in self.list_managed() if r.kind == "directory"]

    def list_managed(self) -> list[ManagedResource]:
        found = hostprobe.list_managed(
            self.connection(),
            self.base_dir,
            settings.SANDHUB_INSTANCE,
            sudo=self.facts().sudo,
        )
        return found + snapshots.managed(self.connection(), self.base_dir, sudo=self.facts().sudo)

    # --- snapshots (snapshots.py) ------------------------------------------------------------
    def snapshot(
        self, state: dict[str, Any], snapshot_id: str, labels: dict[str, str]
    ) -> SnapshotTaken:
        return snapshots.take(self.connection(), state, self.base_dir, snapshot_id, labels)

    def delete_snapshot(self, snapshot_state: dict[str, Any]) -> None:
        snapshots.delete(self.connection(), snapshot_state, self.base_dir)

    def export_snapshot(self, snapshot_state: dict[str, Any]) -> Iterator[bytes]:
        return snapshots.export(self.connection(), snapshot_state, self.base_dir)

    def import_snapshot(
        self, snapshot_id: str, labels: dict[str, str], chunks: Iterable[bytes]
    ) -> SnapshotTaken:
        root = self.facts().per_sandbox_users  # who provisions here, and so reads it back
        return snapshots.import_(
            self.connection(), self.base_dir, snapshot_id, labels, chunks, root=root
        )

    def fetch_host_key(self) -> HostKey:
        address, port = parse_endpoint(self.host.endpoint)
        key = hostkeys.fetch_host_key(address, port)
        return HostKey(key_type=key.key_type, fingerprint=key.fingerprint)
