"""Create and destroy of an isolated sandbox on an SSH host (issue 23), beside `ssh true`,
`sudo -n true` and a bare bubblewrap start, in one run.

    .venv/bin/python bench/bench_ssh_create.py [--runs 10] [--warmup 1] [--floor-runs 5]
                                               [--disk-mb 5120]

Starts a real OpenSSH sshd on loopback (tests/ssh/sshd.py, with the login user of
tests/ssh/logins.py that may `sudo -n`), reads the host's facts as the probe does, and stops
unless they say the host can isolate (hosts/backends/ssh/capabilities.py). Then, on one
SshConnection as that user, after a warm-up:

1. create: hosts.backends.ssh.provision.provision of a sandbox with the platform's default
   limits (1 cpu, 512 MB, 256 pids, a --disk-mb loop disk): its Unix user, cgroups, disk,
   the bubblewrap holder, and with network on slirp4netns and the egress rule; --runs times
   with network off, --runs times with network on. Each sandbox is checked to be isolated
   (its state says so, `hostname` run through its namespaces says `sandbox`, and tap0 is
   there exactly when network is on; not timed), then removed by provision.destroy, which
   is timed too;
2. `true` over the same connection (SshConnection.run): one SSH round trip;
3. `sudo -n true` over the same connection: the round trip and sudo, the floor of any script
   that runs as root on the host (provision and destroy both do);
4. bubblewrap started here, bare: `bwrap --ro-bind / / --unshare-all true` as the
   unprivileged test user (setpriv), from this process (fork and exec included).

They run round by round (a create with network off, one with network on, --floor-runs of
each of 2-4), so load from elsewhere falls on all of them alike; the first --warmup rounds
are not counted. Prints the load average before and after, p50 and p95 of each, and the
ratios create / ssh true and create / bwrap. Needs root (it starts sshd and creates users).
sshd, the sandboxes (users, cgroups, mounts, egress rules) and the scratch files are removed
at the end, also after an error or Ctrl-C.
Compare the ratios of one run, not figures between days.
"""

from __future__ import annotations

import argparse
import logging
import os
import pwd
import secrets
import shlex
import shutil
import string
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from statistics import median
from typing import Any

from _setup import ROOT, percentile, summary, timings
from bench_ssh_mcp import base_directory, remove_leftovers, start_sshd

INSTANCE = "bench-ssh-create"


def new_spec(network: bool, disk_mb: int) -> Any:
    """A sandbox as the platform makes one by default (sandboxes/policy/limits.py)."""
    from hosts.backends.base import SandboxSpec
    from sandboxes.policy.limits import DEFAULT_CPUS, DEFAULT_MEMORY_MB, DEFAULT_PIDS_LIMIT

    alphabet = string.ascii_lowercase + string.digits
    return SandboxSpec(
        sandbox_id="sb_" + "".join(secrets.choice(alphabet) for _ in range(12)),
        image_reference="",
        cpus=DEFAULT_CPUS,
        memory_mb=DEFAULT_MEMORY_MB,
        pids_limit=DEFAULT_PIDS_LIMIT,
        network=network,
        disk_mb=disk_mb,
    )


def check_isolated(conn: Any, state: dict[str, Any], network: bool) -> None:
    """SystemExit unless the sandbox is isolated: its state says so, a command entered
    through its namespaces sees the holder's UTS namespace (hostname `sandbox`), and its
    network namespace has slirp4netns's tap0 exactly when network is on."""
    from hosts.backends.ssh.isolation import enter_prefix

    if not state.get("isolated"):
        raise SystemExit(f"sandbox {state['sandbox_id']} is NOT isolated: {state}")
    look = "hostname; cat /proc/net/dev"
    result = conn.run(shlex.join([*enter_prefix(state), "sh", "-c", look]), timeout=30)
    said = result.stdout.decode(errors="replace")
    if not result.ok or said.split("\n", 1)[0] != "sandbox" or ("tap0:" in said) != network:
        raise SystemExit(f"{look} in sandbox {state['sandbox_id']} gave {result}")


def create_destroy(
    conn: Any, facts: Any, base: str, network: bool, disk_mb: int, made: list[dict[str, Any]]
) -> tuple[float, float]:
    """Seconds of one provision and of its destroy. The sandbox is in `made` from its
    creation until its removal, for the caller's cleanup."""
    from hosts.backends.ssh.provision import destroy, provision

    spec = new_spec(network, disk_mb)
    started = time.perf_counter()
    state = provision(conn, facts, spec, base, INSTANCE)
    created = time.perf_counter()
    made.append(state)
    check_isolated(conn, state, network)
    removing = time.perf_counter()
    destroy(conn, state, base_dir=base)
    removed = time.perf_counter()
    made.remove(state)
    return created - started, removed - removing


def remote(conn: Any, command: str) -> Callable[[], None]:
    """`command` over the connection, refusing a failure: a fast failure is not a figure."""

    def run() -> None:
        result = conn.run(command, timeout=30)
        if not result.ok:
            raise SystemExit(f"{command} over SSH gave {result}")

    return run


def bare_bwrap(user: str) -> Callable[[], None]:
    """bubblewrap with every namespace of its own, as an unprivileged user, started here."""
    entry = pwd.getpwnam(user)
    argv = ["setpriv", f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}", "--clear-groups",
            "--", shutil.which("bwrap") or "bwrap", "--ro-bind", "/", "/", "--unshare-all",
            "true"]  # fmt: skip

    def run() -> None:
        done = subprocess.run(argv, capture_output=True, timeout=30)
        if done.returncode != 0:
            raise SystemExit(f"{shlex.join(argv)} gave {done.returncode}: {done.stderr!r}")

    return run


def destroy_quietly(conn: Any, made: list[dict[str, Any]], base: str) -> None:
    """Sandboxes an error left between create and destroy (the leftover sweep follows)."""
    from hosts.backends.ssh.provision import destroy

    for state in list(made):
        try:
            destroy(conn, state, base_dir=base)
        except Exception as exc:  # the sweep of the base directory removes it; the first
            print(f"could not destroy {state['sandbox_id']}: {exc}", file=sys.stderr)  # stands


def ratio(top: list[float], bottom: list[float]) -> str:
    return f"{median(top) / median(bottom):.1f}x"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="creates per network setting")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--floor-runs", type=int, default=5, help="of each floor per round")
    parser.add_argument("--disk-mb", type=int, default=5120, help="the team default's disk")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "platform_site.settings")
    import django

    django.setup()
    logging.getLogger("paramiko").setLevel(logging.WARNING)
    from hosts.backends.ssh.connection import SshConnection
    from hosts.backends.ssh.hostprobe import host_facts
    from tests.ssh.logins import PLAIN_USER, SUDO_USER

    server: Any = None
    conn: Any = None
    facts: Any = None
    base_dir: Path | None = None
    made: list[dict[str, Any]] = []
    base = ""
    load_before = os.getloadavg()
    try:
        server = start_sshd()
        base_dir = base_directory(SUDO_USER)
        base = str(base_dir / "base")  # provision makes it
        conn = SshConnection(server.target(username=SUDO_USER))
        facts = host_facts(conn)
        if not facts.isolated:
            why = "; ".join(facts.isolation_missing) or "no per-sandbox users (sudo -n)"
            raise SystemExit(f"this host cannot isolate sandboxes: {why}")
        floors = {
            "ssh true": remote(conn, "true"),
            "ssh sudo": remote(conn, "sudo -n true"),
            "bwrap": bare_bwrap(PLAIN_USER),
        }
        figures: dict[str, list[float]] = {}
        # Round by round, each kind in turn: a burst of load from elsewhere (tests running
        # beside) then falls on every figure alike, not on one of them.
        for round_ in range(args.warmup + args.runs):
            for network, name in ((False, "off"), (True, "on")):
                create, remove = create_destroy(conn, facts, base, network, args.disk_mb, made)
                if round_ >= args.warmup:
                    figures.setdefault(f"create {name}", []).append(create)
                    figures.setdefault(f"destroy {name}", []).append(remove)
            for label, action in floors.items():
                seconds = timings(args.floor_runs, action)
                if round_ >= args.warmup:  # the warm-up's: shell and sudo caches, bwrap's pages
                    figures.setdefault(label, []).extend(seconds)
    finally:
        if conn is not None:
            destroy_quietly(conn, made, base)
            conn.close()
        if server is not None:
            server.close()
        remove_leftovers(base_dir)

    load_after = os.getloadavg()
    print(
        f"SSH host {server.address}:{server.port} as {SUDO_USER} (sudo -n), isolated per the "
        f"probe (cgroup {facts.cgroup}, systemd {facts.systemd}); {args.runs} creates each way "
        f"after {args.warmup} warm-up, {args.disk_mb} MB disk; {args.floor_runs} of each floor "
        f"per round; load average {load_before[0]:.2f} before, {load_after[0]:.2f} after "
        f"({os.cpu_count()} cpus)"
    )
    rows = (
        ("create, network off (provision)", "create off"),
        ("destroy, network off", "destroy off"),
        ("create, network on (slirp4netns)", "create on"),
        ("destroy, network on", "destroy on"),
        ("ssh `true` (SshConnection.run)", "ssh true"),
        ("ssh `sudo -n true`", "ssh sudo"),
        ("bare bwrap --unshare-all true (local, user)", "bwrap"),
    )
    for label, key in rows:
        print(summary(label, figures[key]))
    for name in ("off", "on"):
        creates = figures[f"create {name}"]
        print(
            f"create, network {name}: p50 {median(creates) * 1000:.1f} ms, "
            f"p95 {percentile(creates, 95) * 1000:.1f} ms; "
            f"create / ssh true {ratio(creates, figures['ssh true'])}, "
            f"create / sudo -n true {ratio(creates, figures['ssh sudo'])}, "
            f"create / bwrap {ratio(creates, figures['bwrap'])}"
        )


if __name__ == "__main__":
    main()
