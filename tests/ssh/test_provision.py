"""Sandboxes on an SSH host made and removed for real (hosts.backends.ssh: layout, provision)
through a real sshd on loopback (the `server` of tests/conftest.py), as either login user of
tests/ssh/logins.py: `sandhub-test-sudo` may `sudo -n` anything (per-sandbox users),
`sandhub-test-nosudo` may not (every sandbox runs as it). Probes and list_managed are in
test_hostprobe.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time

import pytest

from hosts.backends.base import BackendError, SandboxGone
from hosts.backends.ssh import layout
from hosts.backends.ssh.provision import destroy, ensure_present, provision, status
from tests.ssh.helpers import (
    INSTANCE,
    alive,
    modes,
    new_id,
    sh,
    spec,
    start_detached,
    timed,
    user_exists,
)
from tests.ssh.logins import PLAIN_USER, SUDO_USER

pytestmark = pytest.mark.sshd


# -- provision and destroy ---------------------------------------------------------------------


def test_own_user_sandbox_layout_and_removal(sudo, base):
    sudo_conn, sudo_facts = sudo
    assert sudo_facts.per_sandbox_users and sudo_facts.login_user == SUDO_USER
    state, provision_took = timed(provision, sudo_conn, sudo_facts, spec(), base, INSTANCE)
    sid, user, meta = state["sandbox_id"], state["user"], state["meta"]
    assert user == "sbx-" + sid[3:] and state["own_user"] is True
    assert state["dir"] == f"{base}/{sid}" and state["workspace"] == f"{base}/{sid}/workspace"
    assert state["limits"] == {"memory_mb": 512, "cpus": 1.5, "pids": 200}
    assert state["env"]["GREETING"] == "hi there" and state["env"]["CUDA_VISIBLE_DEVICES"] == ""
    assert modes(sudo_conn, base, state["dir"], state["workspace"], meta, f"{meta}/jobs") == [
        f"711 {SUDO_USER} {SUDO_USER}", "711 root root", *[f"700 {user} {user}"] * 3,
    ]  # fmt: skip
    assert sh(sudo_conn, f"cat {meta}/instance", root=True) == INSTANCE + "\n"
    entry = sh(sudo_conn, f"getent passwd {user}").strip().split(":")
    assert entry[5:] == [state["workspace"], "/bin/bash"]
    assert sh(sudo_conn, f"getent shadow {user}", root=True).split(":")[1].startswith("!")

    said = sh(
        sudo_conn, layout.as_sandbox(state, "id -un; pwd; env", cwd="/workspace", own_env=True)
    )
    lines = said.splitlines()
    assert lines[:2] == [user, state["workspace"]]
    assert {f"SANDHUB_SANDBOX_ID={sid}", f"HOME={state['workspace']}", "GREETING=hi there"} <= set(
        lines
    )
    assert not [ln for ln in lines if ln.startswith(("SSH_", "MAIL=", "SUDO_"))], lines
    limits = sh(sudo_conn, layout.as_sandbox(state, "cat /proc/self/limits")).splitlines()
    assert f"{512 * 1024 * 1024}" in next(ln for ln in limits if "address" in ln)
    assert next(ln for ln in limits if "processes" in ln).split()[2:4] == ["200"] * 2
    # Left in the shared temporary directories, where a later user given its uid would find them.
    left = [f"/tmp/sandhub-left-{sid}", f"/dev/shm/sandhub-left-{sid}"]
    sh(sudo_conn, layout.as_sandbox(state, f"echo x > {left[0]}; mkdir {left[1]}; : > {left[1]}/f"))
    assert all(os.path.exists(path) for path in left)

    _, destroy_took = timed(destroy, sudo_conn, state)
    assert not user_exists(sudo_conn, user)
    assert not os.path.lexists(state["dir"]) and os.path.isdir(base)
    assert not any(os.path.lexists(path) for path in left)
    print(f"\nown user: provision {provision_took}, destroy {destroy_took}")


def test_shared_user_sandbox(plain, base):
    plain_conn, plain_facts = plain
    assert not plain_facts.sudo and not plain_facts.per_sandbox_users
    state, provision_took = timed(
        provision, plain_conn, plain_facts, spec(gpus=(1,)), base, INSTANCE
    )
    assert state["user"] == PLAIN_USER and state["own_user"] is False
    assert state["env"]["CUDA_VISIBLE_DEVICES"] == "1"
    paths = (base, state["dir"], state["workspace"], state["meta"])
    owner = f"{PLAIN_USER} {PLAIN_USER}"
    assert modes(plain_conn, *paths, root=False) == [f"711 {owner}", *[f"700 {owner}"] * 3]
    said = sh(plain_conn, layout.as_sandbox(state, ["sh", "-c", 'id -un; echo "$HOME"']))
    assert said.splitlines() == [PLAIN_USER, state["workspace"]]
    # One of the sandbox's processes left running, and one of the login user's own.
    mine = start_detached(plain_conn, state)
    other = int(sh(plain_conn, "setsid nohup sleep 1000 >/dev/null 2>&1 & echo $!").strip())
    try:
        _, destroy_took = timed(destroy, plain_conn, state)
        assert not alive(plain_conn, mine)
        assert alive(plain_conn, other), "destroy killed a process that is not the sandbox's"
        assert not os.path.lexists(state["dir"]) and os.path.isdir(base)
    finally:
        subprocess.run(["kill", "-KILL", str(other)])
    print(f"\nshared user: provision {provision_took}, destroy {destroy_took}")


def test_sandboxes_cannot_read_or_signal_each_other(sudo, base):
    sudo_conn, sudo_facts = sudo
    a, b = (provision(sudo_conn, sudo_facts, spec(), base, INSTANCE) for _ in range(2))
    sh(sudo_conn, layout.as_sandbox(b, ["sh", "-c", "echo secret > s"], cwd="/workspace"))
    sleeper = start_detached(sudo_conn, b)
    for attempt in (f"cat {b['workspace']}/s", f"ls {b['workspace']}", f"ls {b['meta']}"):
        result = sudo_conn.run(layout.as_sandbox(a, attempt), timeout=30)
        assert result.exit_code != 0 and b"Permission denied" in result.stderr, attempt
    refused = sudo_conn.run(layout.as_sandbox(a, f"kill -KILL {sleeper}"), timeout=30)
    assert refused.exit_code != 0 and b"not permitted" in refused.stderr
    assert alive(sudo_conn, sleeper)
    destroy(sudo_conn, a)
    assert alive(sudo_conn, sleeper), "destroying A touched B"
    destroy(sudo_conn, b)
    assert not alive(sudo_conn, sleeper)


# Keeps starting new detached sleeps: destroy must still end with none left.
RESPAWNER = "setsid sh -c 'while :; do setsid sleep 100 & sleep 0.01; done' >/dev/null 2>&1 &"


@pytest.mark.parametrize("own", [True, False], ids=["own-user", "shared-user"])
def test_destroy_kills_detached_and_respawning_processes(own, request, base):
    conn, facts = request.getfixturevalue("sudo" if own else "plain")
    state = provision(conn, facts, spec(), base, INSTANCE)
    sleeper = start_detached(conn, state)
    sh(conn, layout.as_sandbox(state, RESPAWNER))
    time.sleep(0.2)
    marker = f"SANDHUB_SANDBOX_ID={state['sandbox_id']}"
    count = f"grep -lzxF {marker} /proc/[0-9]*/environ 2>/dev/null | wc -l"
    assert int(sh(conn, count, root=own)) >= 3
    destroy(conn, state)
    assert not alive(conn, sleeper) and int(sh(conn, count, root=own)) == 0
    assert user_exists(conn, state["user"]) is not own
    assert not os.path.lexists(state["dir"])
    destroy(conn, {"sandbox_id": state["sandbox_id"]}, base_dir=base)  # again, by id only


def test_status_and_destroy_of_gone_half_made_and_bare_sandboxes(sudo, base):
    sudo_conn, sudo_facts = sudo
    state = provision(sudo_conn, sudo_facts, spec(), base, INSTANCE)
    destroy(sudo_conn, state)
    destroy(sudo_conn, state)
    # Never made at all; made, its directory removed by hand; known only by its id.
    never_id = new_id()
    never = {**state, "sandbox_id": never_id, "dir": f"{base}/{never_id}", "own_user": True,
             "user": layout.user_name(never_id)}  # fmt: skip
    destroy(sudo_conn, never)
    half = provision(sudo_conn, sudo_facts, spec(), base, INSTANCE)
    assert status(sudo_conn, half) == "running"
    ensure_present(sudo_conn, half)
    shutil.rmtree(half["dir"])
    assert status(sudo_conn, half) == "missing"
    with pytest.raises(SandboxGone):
        ensure_present(sudo_conn, half)
    destroy(sudo_conn, half)
    assert not user_exists(sudo_conn, half["user"])
    bare = provision(sudo_conn, sudo_facts, spec(), base, INSTANCE)
    start_detached(sudo_conn, bare)
    destroy(sudo_conn, {"sandbox_id": bare["sandbox_id"]}, base_dir=base)
    assert not user_exists(sudo_conn, bare["user"]) and not os.path.lexists(bare["dir"])


def test_failed_provision_leaves_nothing(sudo, plain, workdir):
    (sudo_conn, sudo_facts), (plain_conn, plain_facts) = sudo, plain
    # The no-sudo user cannot write the base directory: nothing made.
    root_only = workdir / "root-only"
    root_only.mkdir(mode=0o755)
    with pytest.raises(BackendError, match="not writable by sandhub-test-nosudo"):
        provision(plain_conn, plain_facts, spec(), str(root_only), INSTANCE)
    assert list(root_only.iterdir()) == []
    # Half-way: directory and user made, then the user cannot enter its workspace (a closed
    # directory above the base): both are removed again.
    closed = workdir / "closed"
    closed.mkdir(mode=0o700)
    failing = spec()
    with pytest.raises(BackendError, match=r"not open to other users \(o\+x\)"):
        provision(sudo_conn, sudo_facts, failing, str(closed / "base"), INSTANCE)
    assert list((closed / "base").iterdir()) == []
    assert not user_exists(sudo_conn, layout.user_name(failing.sandbox_id))
    # A directory of that id already there is refused and left as it was.
    taken = spec()
    (closed / "base" / taken.sandbox_id).mkdir()
    (closed / "base" / taken.sandbox_id / "keep").write_text("x")
    with pytest.raises(BackendError, match="already exists"):
        provision(sudo_conn, sudo_facts, taken, str(closed / "base"), INSTANCE)
    assert (closed / "base" / taken.sandbox_id / "keep").read_text() == "x"


@pytest.mark.parametrize("state", [
    {"sandbox_id": "sb_abc123; rm -rf /"}, {"sandbox_id": "../sb_abc123"},
    {"sandbox_id": "sb_abc123", "dir": "/", "own_user": False, "user": "x"},
    {"sandbox_id": "sb_abc123", "dir": "/var/tmp/sb_other1", "own_user": False},
    {"sandbox_id": "sb_abc123", "dir": "/var/tmp/x/../sb_abc123", "own_user": False},
    {"sandbox_id": "sb_abc123", "dir": "/sb_abc123", "own_user": False},
    {"sandbox_id": "sb_abc123", "dir": "/var/tmp/sb_abc123", "own_user": True, "user": "root"},
])  # fmt: skip
def test_states_and_specs_that_never_reach_a_shell(sudo, state, workdir):
    with pytest.raises(BackendError):
        destroy(sudo[0], state)
    with pytest.raises(BackendError, match="malformed sandbox id"):
        provision(*sudo, spec(state["sandbox_id"].replace("abc", "AbC")), str(workdir), "x")
    with pytest.raises(BackendError, match="malformed instance"):
        provision(*sudo, spec(), str(workdir), "two\nlines")
    assert list(workdir.iterdir()) == []
