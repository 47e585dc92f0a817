"""Two teams' sandboxes on ONE SSH host: limits for the sandbox as a whole, and a destroy that
never follows a tenant's links as root (issue 23, findings 3 and 4 of the red-team run; the
others are in test_ssh_isolation.py, which says how the stage is set).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import stat
from pathlib import Path

import pytest

from hosts.backends.base import SandboxSpec
from sandboxes import services
from tests.security.ssh_tenants import (
    PROBE,
    IsolationHost,
    Pair,
    host_pid_of,
    probe,
    run,
    stop_quietly,
    wait_for,
)
from tests.ssh.helpers import new_id

pytestmark = [pytest.mark.sshd]

RACE_TRIES = 20
RACE_ROOTS = ("/tmp", "/var/tmp", "/dev/shm")  # where destroy looked for the user's files
# -- 4. the destroy race -------------------------------------------------------------------------


def test_destroy_never_follows_a_tenants_links_as_root(pair: Pair):
    """Team A's sandbox swaps, in each shared temporary directory, a directory of its own with
    a symlink to a root-owned directory, over and over (renameat2 RENAME_EXCHANGE); a second
    sandbox of the attacker (A2, made and destroyed by the backend) puts a file of its own in
    that directory, named like one of root's there, and is destroyed meanwhile: 20 times, a
    new A2 and a new name each time. Every file of root's stays."""
    stage, alice = pair.stage, pair.stage.alice
    backend = stage.backend()
    tag = secrets.token_hex(6)
    victims = Path(f"/var/tmp/sandhub-victim-{tag}")
    victims.mkdir(mode=0o755)
    names = [f"victim-{attempt:02d}" for attempt in range(1, RACE_TRIES + 1)]
    for name in names:
        (victims / name).write_text("root's own\n")
        (victims / name).chmod(0o644)
    assert {path.stat().st_uid for path in [victims, *victims.iterdir()]} == {0}
    loop = services.start_background(
        alice,
        pair.a,
        f"exec python3 isoprobe.py race 240 {victims} {tag} {' '.join(RACE_ROOTS)}",
    )
    planted: list[dict[str, str]] = []
    try:
        wait_for(
            lambda: "racing" in services.check_background(alice, pair.a, loop.id).output,
            "the exchange loop to start in team A's sandbox",
        )
        for attempt, name in enumerate(names, start=1):
            spec = SandboxSpec(sandbox_id=new_id(), image_reference="", cpus=1.0, memory_mb=256,
                               pids_limit=64, network=False, disk_mb=64)  # fmt: skip
            state = backend.provision(spec)
            try:
                result = backend.exec(
                    state,
                    ["python3", "-c", PROBE, "plant", tag, name, *RACE_ROOTS],
                    cwd="/workspace",
                    env={},
                    timeout=30,
                    output_cap=4096,
                    once=True,
                )
                assert result.exit_code == 0, result
                planted.append(json.loads(result.stdout.decode().splitlines()[-1]))
            finally:
                backend.destroy(state)
            gone = sorted(n for n in names if not (victims / n).exists())
            assert not gone, (
                f"destroying the attacker's sandbox {spec.sandbox_id} (try {attempt} of "
                f"{RACE_TRIES}) deleted the root-owned file {victims / gone[0]}: root followed "
                f"the link team A's sandbox swapped in. Where A2's file was put: {planted[-1]}"
            )
        assert all((victims / n).read_text() == "root's own\n" for n in names)
        # Passed: how often A2 got its file into A's directory (never, with a private /tmp).
        into = sum("planted" in where.values() for where in planted)
        print(f"A2's file was in A's directory in {into} of {RACE_TRIES} tries: {planted[-1]}")
    finally:
        stop_quietly(alice, pair.a, job=loop.id)
        wait_for(lambda: host_pid_of(tag) is None, "the exchange loop to end", timeout=20)
        for root in RACE_ROOTS:  # what the loop left on the host, if it shares the host's
            for leftover in (Path(f"{root}/race-{tag}"), Path(f"{root}/race-{tag}.link")):
                with contextlib.suppress(FileNotFoundError):
                    if stat.S_ISDIR(leftover.lstat().st_mode):
                        shutil.rmtree(leftover)
                    else:
                        leftover.unlink()
        shutil.rmtree(victims, ignore_errors=True)


# -- 5. limits for the sandbox as a whole ------------------------------------------------------


def test_memory_is_limited_for_the_sandbox_as_a_whole(pair: Pair):
    stage, alice, bob = pair.stage, pair.stage.alice, pair.stage.bob
    box = stage.create(alice, memory_mb=512)
    # 5 processes of 300 MB each, holding it at one common moment 8 s after they start.
    statuses = probe(alice, box, "hog", 5, 300, 8, timeout=120)["statuses"]
    held = [status for status in statuses if status == 0]
    assert len(held) <= 1, (
        f"{len(held)} of 5 processes held 300 MB each at once ({300 * len(held)} MB) in a "
        f"sandbox of memory_mb=512; exit statuses {statuses} (negative: killed by that signal)"
    )
    assert any(status < 0 for status in statuses), statuses  # killed (OOM), in the sandbox
    # The sandbox, the other team's sandbox and the host carry on.
    assert run(alice, box, "echo alive").stdout.strip() == "alive"
    assert run(bob, pair.b, "echo alive").stdout.strip() == "alive"


def test_cpus_limit_the_sandbox_as_a_whole(pair: Pair):
    if (os.cpu_count() or 1) < 2:
        pytest.skip("cpus=1.0 can only be exceeded on a machine with 2 CPUs or more")
    stage, alice = pair.stage, pair.stage.alice
    box = stage.create(alice, cpus=1.0)
    used = probe(alice, box, "burn", 3, 5, timeout=60)
    share = used["cpu"] / used["wall"]
    assert share <= 1.10, (
        f"3 busy loops in a sandbox of cpus=1.0 used {share:.0%} of one CPU "
        f"({used['cpu']:.1f} CPU seconds in {used['wall']:.1f} s)"
    )


@pytest.fixture(scope="module")
def small(stage: IsolationHost) -> str:
    """Team B's sandbox with a 64 MB workspace and 128 MB of memory."""
    return stage.create(stage.bob, disk_mb=64, memory_mb=128)


def test_writing_past_disk_mb_fails_with_no_space(pair: Pair, small: str):
    bob = pair.stage.bob
    said = run(
        bob,
        small,
        "dd if=/dev/urandom of=big.bin bs=1M count=100 iflag=fullblock 2>&1; echo exit=$?; "
        "ls -s --block-size=1M big.bin; rm -f big.bin",
    ).stdout
    refused = "No space left on device" in said and "exit=0" not in said
    assert refused, f"100 MB written into the workspace of a sandbox with disk_mb=64: {said!r}"


def test_dev_shm_is_size_limited(pair: Pair, small: str):
    """A /dev/shm of the sandbox's own, smaller than 200 MB for a sandbox of 128 MB (Docker
    gives 64 MB): the write ends with ENOSPC, not with the OOM killer."""
    bob = pair.stage.bob
    name = f"/dev/shm/iso-{secrets.token_hex(6)}"
    said = run(
        bob,
        small,
        f"dd if=/dev/zero of={name} bs=1M count=200 2>&1; echo exit=$?; "
        f"ls -s --block-size=1M {name}; rm -f {name}",
    ).stdout
    refused = "No space left on device" in said and "exit=0" not in said
    assert refused, f"200 MB written into /dev/shm of a sandbox with memory_mb=128: {said!r}"
