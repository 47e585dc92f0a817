"""Fork of a sandbox with a large workspace, beside a raw copy of the same bytes on the same
disk, in one run (issue 25's target: the fork at most 3x the raw copy).

    .venv/bin/python bench/lifecycle_fork.py [--size-mb 1024] [--rounds 4]

A Docker sandbox on the local engine gets a /workspace disk of size + 512 MB, and size MB of
random bytes written inside it (by a command in the sandbox). Then `rounds` times each,
alternately (each first in every other round):

- the fork, through the services, timed as one: fork_sandbox (a snapshot of the sandbox, the
  container paused and its filesystem frozen while its disk image is copied, then a sandbox
  whose disk is that image, renamed: the fork's snapshot is its own), to the new sandbox
  running; the sandbox is deleted after, untimed;
- the fork keeping its snapshot (keep_snapshot: the image is copied again into the new
  sandbox's disk, since the snapshot stays), with its two parts, snapshot_sandbox and
  create_sandbox(snapshot=...);
- the raw copy: `cp --sparse=always` of the source's disk image to a file beside it (the
  same bytes, the same disk; coreutils' own copy, where the fork uses the platform's,
  hosts/backends/docker/sparsecopy.py, which starts each chunk's write-back as it goes),
  removed after, untimed.

`sync` runs before each timing (untimed), so each starts with nothing dirty in the page
cache. The raw copy is timed twice: as `cp` returns (its bytes may still be in the page
cache only), and until they are on the disk (`sync` of the copy): the new sandbox's disk is,
since setting up a loop device on a file flushes it first. The fork copies the bytes once
(its floor: one raw copy on the disk, plus a container's start); keeping the snapshot, twice.
Prints each median and the ratios.

Uses a throwaway SQLite database, its own SANDHUB_INSTANCE (anything left is swept), and the
machine's engine; needs root (the sandbox disks are loop mounts).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import time
from pathlib import Path

from _setup import (
    bench_instance,
    bench_principal,
    django_on_scratch_db,
    lift_creation_limits,
    ms,
    remove_scratch,
    sweep_containers,
)


def measure(size_mb: int, rounds: int = 4) -> list[str]:
    """The fork of a sandbox holding size_mb MB and the raw copy of the same bytes: lines to
    print (each median, each part of the fork, the ratio)."""
    from django.conf import settings

    from sandboxes import services
    from sandboxes.models import Sandbox
    from tenants.models import Team

    principal = bench_principal()
    disk_mb = size_mb + 512
    Team.objects.filter(pk=principal.team.pk).update(
        max_disk_mb_per_sandbox=disk_mb,
        max_snapshot_mb=4 * disk_mb,
        # Room for its three, beside what a caller (bench_lifecycle.py) may still run.
        max_running_sandboxes=max(principal.team.max_running_sandboxes, 10),
    )
    principal.team.refresh_from_db()
    source = services.create_sandbox(principal, disk_mb=disk_mb, memory_mb=256)
    try:
        write = services.run_command(
            principal, source.id, f"head -c {size_mb}M /dev/urandom > data.bin", timeout=1800
        )
        assert write.exit_code == 0, write.stderr
        state = Sandbox.objects.get(public_id=source.id).backend_state
        image = Path(settings.SANDHUB_DISK_DIR) / f"{state['volume']}.img"
        forks, keeps, parts, raws, flushed = [], [], [], [], []
        for index in range(rounds):
            # Each first in turn: what the one before left in the page cache helps both.
            for which in ("raw", "fork") if index % 2 == 0 else ("fork", "raw"):
                if which == "raw":
                    copy = image.with_name(f"raw-copy-{index}.img")
                    raws.append(_raw_copy(image, copy))
                    flushed.append(_raw_copy(image, copy, flush=True))
                else:
                    forks.append(_fork(principal, source.id))
                    kept, part = _fork_keeping(principal, source.id, f"bench fork {index}")
                    keeps.append(kept)
                    parts.append(part)
    finally:
        services.delete_sandbox(principal, source.id)
    fork, kept, raw, on_disk = (statistics.median(t) for t in (forks, keeps, raws, flushed))
    snapshot = statistics.median(p[0] for p in parts)
    create = statistics.median(p[1] for p in parts)
    return [
        f"workspace: {size_mb} MB written in the sandbox (disk {disk_mb} MB), {rounds} rounds",
        f"raw copy (cp --sparse=always of the disk image)  median {ms(raw)}",
        f"raw copy, then on the disk (+ sync of the copy)  median {ms(on_disk)}",
        f"fork (fork_sandbox: one copy)                    median {ms(fork)}",
        f"fork keeping its snapshot (two copies)           median {ms(kept)}",
        f"  snapshot_sandbox {ms(snapshot)}, create_sandbox(snapshot=...) {ms(create)}",
        f"fork / raw copy: {fork / raw:.2f}x (target <= 3x)",
        f"fork / raw copy on the disk: {fork / on_disk:.2f}x",
        f"fork keeping its snapshot / raw copy: {kept / raw:.2f}x",
    ]


def _raw_copy(image: Path, target: Path, flush: bool = False) -> float:
    """cp of the image; flush: and until the copy is on the disk (fsync), which a new
    sandbox's disk is before it is used (setting up its loop device flushes it)."""
    subprocess.run(["sync"], check=True)
    started = time.perf_counter()
    subprocess.run(["cp", "--sparse=always", "--", str(image), str(target)], check=True)
    if flush:
        subprocess.run(["sync", "--", str(target)], check=True)
    seconds = time.perf_counter() - started
    target.unlink()
    return seconds


def _fork(principal, sandbox_id: str) -> float:
    from sandboxes import services

    subprocess.run(["sync"], check=True)
    started = time.perf_counter()
    _, made = services.fork_sandbox(principal, sandbox_id)
    done = time.perf_counter()
    services.delete_sandbox(principal, made.id)
    return done - started


def _fork_keeping(principal, sandbox_id: str, name: str) -> tuple[float, tuple[float, float]]:
    from sandboxes import services

    subprocess.run(["sync"], check=True)
    started = time.perf_counter()
    snapshot = services.snapshot_sandbox(principal, sandbox_id, name)
    taken = time.perf_counter()
    made = services.create_sandbox(principal, snapshot=snapshot.id)
    done = time.perf_counter()
    services.delete_sandbox(principal, made.id)
    services.delete_snapshot(principal, snapshot.id)
    return done - started, (taken - started, done - taken)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    instance = bench_instance()
    lift_creation_limits()
    os.environ.setdefault("SANDHUB_WARM_POOL_SIZE", "0")
    scratch = django_on_scratch_db()
    try:
        for line in measure(args.size_mb, args.rounds):
            print(line)
    finally:
        sweep_containers(instance)
        remove_scratch(scratch)


if __name__ == "__main__":
    main()
