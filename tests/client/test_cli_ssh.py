"""The `sandhub` command against a live platform whose sandboxes are on SSH hosts: uvicorn
serving the real ASGI app (tests/conftest.py), a real OpenSSH sshd on loopback
(tests/ssh/sshd.py), the CLI run as a subprocess with SANDHUB_URL / SANDHUB_API_KEY, as on a laptop
(the model: tests/client/test_cli_live.py, the same on Docker).

Every test runs twice, on two hosts:
- "agent": shared by every team, its login user may sudo, so the sandbox has a Unix user of
  its own; manifests, writes and deletions go through the sandbox agent;
- "plain": private to team A, no sudo (the sandbox runs as the login user), and the agent's
  python3 missing, so every call goes the plain way (GNU find, tar and the shared scripts
  over exec channels), as on a host without python3. How the agent is made unavailable is
  tests/ssh/test_plain.py's way: the host's cached backend gets an agent link whose python
  is not installed (the live server runs in this process, so it uses that very backend).

What the server received is read from its audit rows (files.sync.upload's "files"), and what
landed in the sandbox straight from the host's disk (the sshd is this machine).
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hosts.backends import get_backend
from hosts.backends.agent.client import AgentUnavailable
from hosts.backends.ssh.backend import SshBackend
from hosts.models import Host
from sandboxes import services
from sandboxes.models import Sandbox
from tenants.models import AuditLog
from tests.client.helpers import make_tree, sandhub, write
from tests.live import World
from tests.ssh.helpers import ABSENT_PYTHON, register
from tests.ssh.logins import PLAIN_USER, SUDO_USER
from tests.ssh.sshd import Sshd

pytestmark = [
    pytest.mark.sshd,
    pytest.mark.filterwarnings("ignore:The logging capability is deprecated"),
]
CHANGED = ["pkg1/mod1.py", "pkg2/mod2.py", "pkg3/mod3.py"]


# -- hosts and sandboxes -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def module_workdir() -> Iterator[Path]:
    """Base directories of this module's own (open: the no-sudo login user makes its base
    there); what a failed run left of its sandboxes (users, processes) goes with it."""
    path = Path(tempfile.mkdtemp(prefix="sandhub-cli-ssh-", dir="/var/tmp"))
    path.chmod(0o777)
    try:
        yield path
    finally:
        passwd = subprocess.run(["getent", "passwd"], capture_output=True, text=True).stdout
        for line in passwd.splitlines():
            name, home = line.split(":")[0], line.split(":")[5]
            if name.startswith("sbx-") and home.startswith(f"{path}/"):
                subprocess.run(["pkill", "-KILL", "-u", name], capture_output=True)
                subprocess.run(["userdel", name], capture_output=True)
        shutil.rmtree(path, ignore_errors=True)


def without_agent(host: Host) -> SshBackend:
    """The host's backend as the live server finds it, its agent link unable to start (no
    python3), so sync, commands and jobs all go the plain way (tests/ssh/test_plain.py)."""
    backend = get_backend(Host.objects.get(pk=host.pk))
    assert isinstance(backend, SshBackend)
    backend.place.python = ABSENT_PYTHON
    return backend


@pytest.fixture(scope="module", params=["agent", "plain"])
def ssh_sandbox(
    request: pytest.FixtureRequest, world: World, server: Sshd, module_workdir: Path
) -> Iterator[str]:
    """Team A's sandbox on a host of its own, registered as an admin adds it; the host is
    disabled once the sandbox is made, so the next one lands on the next host."""
    Host.objects.filter(kind=Host.Kind.DOCKER).update(enabled=False)  # SSH hosts only
    path = request.param
    base = module_workdir / path
    if path == "agent":
        host = register(server, "cli-ssh-agent", SUDO_USER, base)
        assert host.per_sandbox_users
    else:
        host = register(server, "cli-ssh-plain", PLAIN_USER, base, team=world.team_a)
        assert not host.per_sandbox_users
    backend = without_agent(host) if path == "plain" else None
    alice = world.principal()
    sandbox_id = services.create_sandbox(alice).id
    Host.objects.filter(pk=host.pk).update(enabled=False)
    state = Sandbox.objects.get(public_id=sandbox_id).backend_state
    assert Sandbox.objects.get(public_id=sandbox_id).host_id == host.pk
    assert state["own_user"] == (path == "agent"), state  # a Unix user of its own, or not
    try:
        yield sandbox_id
        if backend is not None:  # still the one without python3: no agent ever served it
            assert get_backend(Host.objects.get(pk=host.pk)) is backend
            with pytest.raises(AgentUnavailable, match=ABSENT_PYTHON):
                backend.agents.client(state)
    finally:
        services.delete_sandbox(alice, sandbox_id)


def on_host(sandbox_id: str, path: str = "proj") -> Path:
    """Where the sandbox's /workspace/<path> is on the host (this machine): in its directory
    (an isolated sandbox calls its workspace /workspace itself)."""
    return Path(Sandbox.objects.get(public_id=sandbox_id).backend_state["dir"], "workspace", path)


def uploads(sandbox_id: str) -> list[AuditLog]:
    rows = AuditLog.objects.filter(action="files.sync.upload", target_id=sandbox_id)
    return list(rows.order_by("id"))


def lstat_tree(root: Path) -> dict[str, tuple[Any, ...]]:
    """Every entry under root as os.lstat sees it: type and permission bits, mtime to the ns
    and content (files) or target (links). Directories: type and bits only, as sync compares
    them (their mtimes change whenever the sandbox writes into them, and the manifest gives
    them as float seconds)."""
    found: dict[str, tuple[Any, ...]] = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            full = Path(folder, name)
            info = os.lstat(full)
            if stat.S_ISLNK(info.st_mode):
                what: Any = os.readlink(full)
            elif stat.S_ISREG(info.st_mode):
                what = full.read_bytes()
            else:
                found[str(full.relative_to(root))] = (info.st_mode, None, None)
                continue
            found[str(full.relative_to(root))] = (info.st_mode, info.st_mtime_ns, what)
    return found


@pytest.fixture(scope="module")
def project(ssh_sandbox: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh laptop tree for each host: 2,000 files in 40 directories, a link, ns mtimes."""
    root = tmp_path_factory.mktemp("laptop") / "proj"
    make_tree(root, 2000)
    return root


# -- the tests ---------------------------------------------------------------------------------


def test_sync_2000_files_then_only_the_3_changed_are_sent(cli_env, project, ssh_sandbox):
    remote = f"{ssh_sandbox}:proj"
    first = sandhub(cli_env, "sync", str(project), remote)
    assert first.returncode == 0, first.stderr
    rows = uploads(ssh_sandbox)
    assert [r.details["files"] for r in rows] == [2000], [r.details for r in rows]
    assert lstat_tree(on_host(ssh_sandbox)).keys() == lstat_tree(project).keys()

    unchanged = sandhub(cli_env, "sync", str(project), remote)
    assert unchanged.returncode == 0 and "sent 0 entries" in unchanged.stderr, unchanged.stderr
    assert len(uploads(ssh_sandbox)) == 1  # the manifest only, no tar

    write(project, CHANGED[0], "changed = True\n")
    write(project, CHANGED[1], "changed = True\n")
    (project / CHANGED[2]).chmod(0o700)
    again = sandhub(cli_env, "sync", str(project), remote)
    assert again.returncode == 0, again.stderr
    assert "sent 3 entries" in again.stderr, again.stderr
    rows = uploads(ssh_sandbox)[1:]
    assert [r.details["files"] for r in rows] == [3], [r.details for r in rows]
    assert sorted(rows[0].details["paths"]) == CHANGED
    there = on_host(ssh_sandbox)
    assert (there / CHANGED[0]).read_text() == "changed = True\n"
    assert (there / CHANGED[2]).stat().st_mode & 0o7777 == 0o700
    for path in CHANGED:
        assert os.lstat(there / path).st_mtime_ns == os.lstat(project / path).st_mtime_ns


def test_the_round_trip_back_is_identical_with_modes_mtimes_and_links(
    cli_env, project, ssh_sandbox, tmp_path
):
    remote = f"{ssh_sandbox}:proj"
    assert sandhub(cli_env, "sync", str(project), remote).returncode == 0
    back = tmp_path / "back"
    pulled = sandhub(cli_env, "sync", remote, str(back))
    assert pulled.returncode == 0, pulled.stderr

    expected = lstat_tree(project)
    got = lstat_tree(back)
    assert len(got) == 2041  # 40 directories, 2,000 files, a link
    assert got.keys() == expected.keys()
    differing = [path for path in expected if got[path] != expected[path]]
    assert not differing, [(p, expected[p][:2], got[p][:2]) for p in differing[:5]]
    assert stat.S_ISLNK(got["pkg0/link"][0]) and got["pkg0/link"][2] == "mod0.py"
    assert got["pkg0/mod0.py"][0] & 0o7777 == 0o755  # every 50th file is executable

    assert lstat_tree(on_host(ssh_sandbox)) == expected  # what the sandbox holds, too


def test_delete_removes_the_extras_in_the_sandbox(cli_env, project, ssh_sandbox):
    remote = f"{ssh_sandbox}:proj"
    assert sandhub(cli_env, "sync", str(project), remote).returncode == 0
    made = sandhub(
        cli_env,
        "run",
        ssh_sandbox,
        "--",
        "mkdir -p proj/junk/deep && touch proj/junk/deep/a proj/stale.txt"
        " && ln -s ../outside proj/pkg5/escape && mkdir -p outside && touch outside/keep",
    )
    assert made.returncode == 0, made.stderr
    there = on_host(ssh_sandbox)
    assert (there / "junk/deep/a").exists() and (there / "stale.txt").exists()

    kept = sandhub(cli_env, "sync", str(project), remote)  # without --delete: extras stay
    assert kept.returncode == 0 and (there / "stale.txt").exists()

    done = sandhub(cli_env, "sync", "--delete", str(project), remote)
    assert done.returncode == 0, done.stderr
    assert not os.path.lexists(there / "junk") and not os.path.lexists(there / "stale.txt")
    assert not os.path.lexists(there / "pkg5/escape")
    assert on_host(ssh_sandbox, "outside/keep").exists()  # the link went, never what it names
    assert lstat_tree(there).keys() == lstat_tree(project).keys()
    rows = AuditLog.objects.filter(action="files.sync.delete", target_id=ssh_sandbox)
    assert [(r.details["paths"], r.details["deleted"]) for r in rows] == [
        (["junk", "pkg5/escape", "stale.txt"], 3)
    ]


def test_run_passes_the_exit_code_and_output_through(cli_env, ssh_sandbox):
    result = sandhub(
        cli_env, "run", ssh_sandbox, "--", "sh", "-c", "echo out; echo err >&2; exit 7"
    )
    assert result.returncode == 7, result.stderr
    assert result.stdout == "out\n" and "err" in result.stderr
    # One word is a shell command line as it is (each run costs the CLI's MCP import, ~1 s).
    listed = sandhub(cli_env, "run", ssh_sandbox, "--", "test -L proj/pkg0/link && echo link")
    assert (listed.returncode, listed.stdout) == (0, "link\n"), listed.stderr
