"""Fixtures of the SSH backend's tests, against real OpenSSH servers on loopback
(tests/ssh/sshd.py; helpers: tests/ssh/helpers.py):

- `sshd`: a server of the module's own, logging in as the shared test user; the agent's
  sandboxes on it (`make_sandbox`, `sandbox`, `link`, `conns`, `base_dir`), the login user's
  sudo while the module runs (`sudo_for_test_user`), and a backend that must go without the
  agent (`plain_backend`);
- `server` (tests/conftest.py: other areas use it too): the server of the two login users of
  tests/ssh/logins.py; their logins (`sudo`, `plain`), a base directory of the test's own
  (`base`), and the host in the database, confirmed and probed (`ssh_host`, `pinned`).

Tests that use either server are marked `sshd` (tests/conftest.py), and so is every module
here that needs one; `make test-fast` leaves them out.
"""

from __future__ import annotations

import dataclasses
import os
import pwd
import secrets
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hosts.backends.agent.link import AgentLink
from hosts.backends.base import SandboxSpec
from hosts.backends.ssh.backend import SshBackend
from hosts.backends.ssh.connection import SshConnection
from hosts.backends.ssh.hostprobe import HostFacts, host_facts
from hosts.backends.ssh.pool import ConnectionPool
from hosts.backends.ssh.provision import destroy, provision
from hosts.models import Host
from sandboxes import services
from tests.leftovers import remove_sandboxes_under
from tests.ssh.helpers import LIMITS, SYSTEM, host_on, make_backend, new_link
from tests.ssh.logins import PLAIN_USER, SUDO_USER
from tests.ssh.sshd import Sshd, running_sshd

AGENT_SUDOERS = Path("/etc/sudoers.d/sandhub-test-agent")

# -- the module's own sshd, the shared test user, and the agent's sandboxes on it -------------


@pytest.fixture(scope="module")
def sshd() -> Iterator[Sshd]:
    """One sshd for a test module (for tests that leave it as they found it)."""
    with running_sshd() as server:
        yield server


@pytest.fixture(scope="module")
def base_dir() -> Iterator[str]:
    path = f"/var/tmp/sandhub-agent-test-{secrets.token_hex(4)}"  # provision makes it
    yield path
    remove_sandboxes_under(Path(path))
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def conns() -> Iterator[ConnectionPool]:
    pool = ConnectionPool()
    yield pool
    pool.close_all()


@pytest.fixture
def link(sshd: Sshd, conns: ConnectionPool) -> Iterator[AgentLink]:
    agents = new_link(sshd, conns)
    yield agents
    agents.close()


@pytest.fixture
def make_sandbox(
    sshd: Sshd, conns: ConnectionPool, base_dir: str, request: pytest.FixtureRequest
) -> Iterator[Callable[..., dict[str, Any]]]:
    """Sandboxes made and removed by provision.provision / destroy (helper A's), sharing the
    login user, or with their own user (then the login user may sudo while the module runs)."""
    made: list[dict[str, Any]] = []
    target = sshd.target()

    def make(*, own_user: bool = False, isolated: bool = False, **changes: Any) -> dict[str, Any]:
        """own_user: a user of its own (sudo), without isolation.py's namespaces unless
        isolated (then the facts are the real probe's: this machine can isolate)."""
        if own_user or isolated:
            request.getfixturevalue("sudo_for_test_user")
        facts = (
            host_facts(conns.get(target))
            if isolated
            else HostFacts(
                login_user=sshd.username,
                uid=pwd.getpwnam(sshd.username).pw_uid,
                sudo=own_user,
                systemd=False,
                python3="3",
                tools=("useradd", "userdel", "setpriv"),
            )
        )
        spec = SandboxSpec(
            sandbox_id="sb_" + secrets.token_hex(6),
            image_reference="",
            cpus=LIMITS["cpus"],
            memory_mb=LIMITS["memory_mb"],
            pids_limit=LIMITS["pids"],
            # Network on an isolated host goes with an egress policy (test_egress_ssh.py).
            network=False,
            env={"SANDBOX_VAR": "from-the-sandbox"},
        )
        spec = dataclasses.replace(spec, **changes)
        state = provision(conns.get(target), facts, spec, base_dir, "sandhub-agent-test")
        made.append(state)
        return state

    yield make
    for state in made:
        destroy(conns.get(target), state, base_dir=base_dir)
        assert not os.path.exists(state["dir"])


@pytest.fixture
def sandbox(make_sandbox: Callable[..., dict[str, Any]]) -> dict[str, Any]:
    return make_sandbox()


@pytest.fixture(scope="module")
def sudo_for_test_user(sshd: Sshd) -> Iterator[None]:
    AGENT_SUDOERS.write_text(f"{sshd.username} ALL=(ALL) NOPASSWD: ALL\n")
    AGENT_SUDOERS.chmod(0o440)
    subprocess.run(["visudo", "-cf", str(AGENT_SUDOERS)], check=True, capture_output=True)
    yield
    AGENT_SUDOERS.unlink(missing_ok=True)


@pytest.fixture
def plain_backend(sshd: Sshd, base_dir: str) -> Iterator[SshBackend]:
    """SshBackend on the module's sshd as a host without python3: every call goes the plain
    way (the Host and its Credential are unsaved model objects: no database is needed)."""
    ssh = make_backend(sshd, base_dir, agent=False, name="plain-box")
    yield ssh
    ssh.close()


# -- the two login users' server (`server`, `workdir`: tests/conftest.py) ----------------------


def _login(server: Sshd, user: str) -> Iterator[tuple[SshConnection, HostFacts]]:
    with SshConnection(server.target(username=user)) as conn:
        yield conn, host_facts(conn)


@pytest.fixture(scope="module")
def sudo_isolated(server: Sshd) -> Iterator[tuple[SshConnection, HostFacts]]:
    """May sudo, with this machine's real facts: sandboxes get users of their own and
    isolation.py's namespaces, cgroups and disks."""
    yield from _login(server, SUDO_USER)


@pytest.fixture(scope="module")
def sudo(sudo_isolated: tuple[SshConnection, HostFacts]) -> tuple[SshConnection, HostFacts]:
    """May sudo, as on a host without bubblewrap: users of their own, no namespaces (a host
    that is then offered only to the team it is private to)."""
    conn, facts = sudo_isolated
    return conn, dataclasses.replace(facts, tools=tuple(t for t in facts.tools if t != "bwrap"))


@pytest.fixture(scope="module")
def plain(server: Sshd) -> Iterator[tuple[SshConnection, HostFacts]]:
    yield from _login(server, PLAIN_USER)  # may not: sandboxes run as it


@pytest.fixture
def base(workdir: Path) -> str:
    return str(workdir / "base")  # provision makes it


@pytest.fixture
def ssh_host(server: Sshd, workdir: Path, settings, docker_host, image) -> Iterator[Host]:
    yield from host_on(server, workdir, settings, docker_host)


@pytest.fixture
def pinned(ssh_host: Host) -> Host:
    info = services.fetch_host_key(SYSTEM, ssh_host.pk)
    services.confirm_host_key(SYSTEM, ssh_host.pk, info.fingerprint)
    services.probe_host(SYSTEM, ssh_host.pk)  # facts (sudo) and GPUs, as the schedule does
    ssh_host.refresh_from_db()
    return ssh_host
