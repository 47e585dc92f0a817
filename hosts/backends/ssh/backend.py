"""SshBackend: sandboxes on a remote Linux machine reached over SSH (settings.SANDHUB_BACKENDS
"ssh"). It composes the pieces of this package, as DockerBackend composes its own:

- connection / pool: one persistent, pinned, TCP_NODELAY connection per host per process;
- provision / layout: a directory per sandbox under the host's base directory, and its own
  Unix user where the login user may `sudo -n`;
- agent / tarstreams: the sandbox agent on an SSH channel (agent/link.py and agent/jobs.py
  do the rest, for every kind), run as the sandbox's
  user, for commands, files and background jobs; tar streams for uploads and downloads;
- sync: a tree's manifest, deletions and a tar of chosen entries (the local client);
- plain: where the login user has no usable python3 (the agent is unavailable), commands,
  background jobs and listings over plain exec channels instead (setsid nohup jobs with an
  exit-code file, Docker's per-command scripts); the agent is always tried first;
- ports: port streams (previews) without the agent: a direct-tcpip channel, on a host
  without per-sandbox users only;
- hostprobe / hostkeys: load, GPUs and facts in one round trip; the host key for an admin.

The host is reached only once its key is pinned (Host.host_key_pinned, confirmed in admin);
the login user is the credential's username, its secret a password or a private key.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import IO, TYPE_CHECKING, Any, TypeVar

from django.conf import settings

from hosts.backends.agent.client import AgentUnavailable
from hosts.backends.agent.jobs import AgentJobs
from hosts.backends.base import (
    BackendError,
    ExecResult,
    FileEntry,
    HostKey,
    JobStatus,
    ManagedResource,
    ManifestPage,
    OutputCallback,
    PortStream,
    ProbeResult,
    SandboxBackend,
    SandboxSpec,
    Unsupported,
)
from hosts.backends.ssh import hostkeys, hostprobe, layout, ports, provision
from hosts.backends.ssh.agent import agent_link
from hosts.backends.ssh.connection import SshConnection, SshTarget
from hosts.backends.ssh.hostprobe import HostFacts
from hosts.backends.ssh.plain import PlainCommands
from hosts.backends.ssh.pool import pool
from hosts.backends.ssh.sync import SshTreeSync
from hosts.backends.ssh.tarstreams import SshTars

if TYPE_CHECKING:
    from hosts.models import Host

T = TypeVar("T")
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


class SshBackend(SandboxBackend):
    kind = "ssh"

    def __init__(self, host: Host) -> None:
        super().__init__(host)
        self.target = target_for(host)
        self.base_dir = host.base_dir or layout.DEFAULT_BASE_DIR
        self.agents = agent_link(self.connection)
        self.jobs = AgentJobs(self.agents)
        self.tars = SshTars(self.agents, self.connection)
        self.plain = PlainCommands(self.connection)
        self.sync = SshTreeSync(self.agents, self.plain, self.tars)
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
            self.connection(), self.facts(), spec, self.base_dir, settings.SANDHUB_INSTANCE
        )

    def destroy(self, state: dict[str, Any]) -> None:
        self.agents.forget(state)  # its processes die with the sandbox's
        provision.destroy(self.connection(), state, base_dir=self.base_dir)

    def status(self, state: dict[str, Any]) -> str:
        return provision.status(self.connection(), state, base_dir=self.base_dir)

    # --- commands ----------------------------------------------------------------------------
    def exec(
        self,
        state: dict[str, Any],
        argv: list[str],
        *,
        cwd: str,
        env: dict[str, str],
        timeout: float,
        output_cap: int,
        on_output: OutputCallback | None = None,
        stdin: bytes | None = None,
        once: bool = False,
    ) -> ExecResult:
        mapped = _mapped(state, argv)
        options: dict[str, Any] = {
            "cwd": cwd,
            "env": env,
            "timeout": timeout,
            "output_cap": output_cap,
            "on_output": on_output,
            "stdin": stdin,
        }
        return _either(
            lambda: self.agents.exec(state, mapped, **options),
            lambda: self.plain.exec(state, mapped, **options),
        )

    def start_background(
        self,
        state: dict[str, Any],
        argv: list[str],
        *,
        cwd: str,
        env: dict[str, str],
        job_id: str,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        options: dict[str, Any] = {"cwd": cwd, "env": env, "job_id": job_id, "timeout": timeout}
        return _either(
            lambda: self.jobs.start_background(state, argv, **options),
            lambda: self.plain.start_background(state, argv, **options),
        )

    def poll_background(
        self, state: dict[str, Any], job: dict[str, Any], tail_bytes: int
    ) -> JobStatus:
        # Either path reads a job either path started: the same files, the same scripts.
        return _either(
            lambda: self.jobs.poll_background(state, job, tail_bytes),
            lambda: self.plain.poll_background(state, job, tail_bytes),
        )

    def cancel_background(self, state: dict[str, Any], job: dict[str, Any]) -> None:
        _either(
            lambda: self.jobs.cancel_background(state, job),
            lambda: self.plain.cancel_background(state, job),
        )

    # --- files -------------------------------------------------------------------------------
    def put_files(
        self, state: dict[str, Any], dest_dir: str, tar_stream: bytes | IO[bytes]
    ) -> None:
        self.tars.put_files(state, dest_dir, tar_stream)

    def get_files(self, state: dict[str, Any], path: str) -> Iterator[bytes]:
        return self.tars.get_files(state, path)

    def list_dir(self, state: dict[str, Any], path: str) -> list[FileEntry]:
        return _either(
            lambda: self.agents.list_dir(state, path),
            lambda: self.plain.list_dir(state, path),
        )

    def manifest(
        self, state: dict[str, Any], root: str, *, after: str | None, limit: int
    ) -> ManifestPage:
        return self.sync.manifest(state, root, after=after, limit=limit)

    def delete_entries(self, state: dict[str, Any], root: str, paths: list[str]) -> int:
        return self.sync.delete_entries(state, root, paths)

    def get_entries(self, state: dict[str, Any], root: str, paths: list[str]) -> Iterator[bytes]:
        return self.sync.get_entries(state, root, paths)

    # --- ports -------------------------------------------------------------------------------
    def open_port(self, state: dict[str, Any], port: int, timeout: float = 5.0) -> PortStream:
        """Through the agent (it checks that the listener is the sandbox user's own); where
        the agent cannot run, a direct-tcpip channel, but only on a host whose sandboxes
        share the login user: with per-sandbox users, the port on the host's loopback may be
        another team's sandbox's, and nothing but the agent can tell."""
        try:
            return self.agents.open_port(state, port, timeout)
        except AgentUnavailable as exc:
            if state.get("own_user") or self.facts().per_sandbox_users:
                raise Unsupported(
                    f"previews on {self.connection().target.where} need python3 on the host: "
                    "its sandboxes have users of their own, and only the sandbox agent can "
                    f"tell whose listener a port is ({exc})"
                ) from exc
        return ports.open_direct(self.connection(), port, timeout)

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
        return hostprobe.list_managed(
            self.connection(),
            self.base_dir,
            settings.SANDHUB_INSTANCE,
            sudo=self.facts().sudo,
        )

    def fetch_host_key(self) -> HostKey:
        address, port = parse_endpoint(self.host.endpoint)
        key = hostkeys.fetch_host_key(address, port)
        return HostKey(key_type=key.key_type, fingerprint=key.fingerprint)


def _mapped(state: dict[str, Any], argv: list[str]) -> list[str]:
    """Arguments that are /workspace paths, as the host has them: the services pass paths
    as arguments of their own commands (read_file, say). /workspace does not exist on an SSH
    host; inside a shell command line nothing is rewritten (commands use relative paths, the
    working directory being the workspace, or $SANDHUB_WORKSPACE)."""
    return [
        layout.host_path(state, arg)
        if arg == layout.WORKSPACE or arg.startswith(layout.WORKSPACE + "/")
        else arg
        for arg in argv
    ]


def _either(agent: Callable[[], T], plain: Callable[[], T]) -> T:
    """agent(); where the agent cannot run (AgentUnavailable: no usable python3 for the
    login user, remembered by the link for a while), plain() over plain exec channels."""
    try:
        return agent()
    except AgentUnavailable:
        return plain()
