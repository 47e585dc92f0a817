"""What idle sandbox agents cost the platform process that holds their streams.

    .venv/bin/python bench/bench_idle_agents.py [--sandboxes 200] [--memory-mb 64]
        [--threads 4] [--disks]

Runs the service layer in this process (as bench_agent.py does), with SANDHUB_AGENT=true, on a
throwaway SQLite database with one team and one host with room for them all. It creates
--sandboxes sandboxes of --memory-mb MB each (a few threads at a time), then:

1. runs one command (`true`) in the first sandbox with the agent off, so the service path
   (database, audit, engine client) is loaded before anything is measured; gc; reads VmRSS
   of this process (/proc/self/status): the baseline, 0 agent connections;
2. with the agent on, runs `true` in every sandbox through services.run_command, one after
   the other in the main thread, so each sandbox's agent is started and then left idle
   holding its stream; gc; VmRSS again;
3. runs `true` once more in every sandbox (the agents are reused) and reads VmRSS a third
   time, to show it stays put.

Prints the RSS at each step, the growth in MiB and per connection (issue 10: <= +60 MB for
200), and this process's threads and live agents before and after (one stream and one reader
thread per agent).
Sandbox disks: the host gets the option disk_limit=false unless --disks (200 loop-mounted
filesystems would measure mkfs, not agents; a disk does not change what an agent holds).
Every sandbox is deleted at the end (a few threads at a time), also after an error or Ctrl-C;
containers still labelled with this run's SANDHUB_INSTANCE are swept.
"""

from __future__ import annotations

import argparse
import gc
import os
import time

from _setup import (
    bench_instance,
    bench_principal,
    create_sandboxes,
    delete_sandboxes,
    django_on_scratch_db,
    lift_creation_limits,
    make_room,
    proc_status,
    remove_scratch,
    sweep_containers,
)

MIB = 2**20


def live_agents() -> int:
    """Agents this process holds a live stream to, over every host's backend (AgentLink's own
    table: a bench may look inside)."""
    from hosts.backends import get_backend
    from hosts.models import Host

    count = 0
    for host in Host.objects.all():
        link = getattr(get_backend(host), "agents", None)
        clients = getattr(link, "_clients", {})
        count += sum(1 for client in list(clients.values()) if client.alive)
    return count


def settled_rss() -> int:
    gc.collect()
    return proc_status("VmRSS")


def run_everywhere(principal, ids: list[str]) -> float:
    """`true` in each sandbox in turn; the seconds it took."""
    from sandboxes import services

    started = time.monotonic()
    for sandbox_id in ids:
        result = services.run_command(principal, sandbox_id, "true")
        if result.exit_code != 0:
            raise SystemExit(f"`true` failed in {sandbox_id}: {result}")
    return time.monotonic() - started


def measure(principal, ids: list[str]) -> list[str]:
    from django.conf import settings

    from sandboxes import services

    settings.SANDHUB_AGENT = False  # the service path loaded, no agent yet
    for _ in range(2):
        services.run_command(principal, ids[0], "true")
    before = {"rss": settled_rss(), "threads": proc_status("Threads"), "agents": live_agents()}
    settings.SANDHUB_AGENT = True
    first = run_everywhere(principal, ids)
    after = {"rss": settled_rss(), "threads": proc_status("Threads"), "agents": live_agents()}
    again = run_everywhere(principal, ids)
    steady = settled_rss()
    grown = after["rss"] - before["rss"]
    count = len(ids)
    rows = [
        ("RSS, 0 agent connections", before["rss"]),
        (f"RSS, {after['agents']} idle agent connections", after["rss"]),
        ("RSS, after a second command in each", steady),
    ]
    return [
        f"sandboxes {count}; `true` in each: first (agent start) {first:.1f} s, "
        f"again (agents reused) {again:.1f} s",
        *[f"{label:<40} {rss / MIB:8.1f} MiB" for label, rss in rows],
        f"{f'growth for {count} connections':<40} {grown / MIB:+8.1f} MiB "
        f"({grown / count / 1024:.0f} KiB each)   (target <= +60 MB for 200)",
        f"threads {before['threads']} -> {after['threads']}, "
        f"live agents {before['agents']} -> {after['agents']}",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sandboxes", type=int, default=200)
    parser.add_argument("--memory-mb", type=int, default=64)
    parser.add_argument("--threads", type=int, default=4, help="creating and deleting")
    parser.add_argument("--disks", action="store_true", help="keep the per-sandbox disk limit")
    args = parser.parse_args()

    os.environ["SANDHUB_AGENT"] = "true"
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    instance = bench_instance()
    lift_creation_limits()
    scratch = django_on_scratch_db()
    from hosts.models import Host

    principal = bench_principal()
    make_room(principal, args.sandboxes)
    if not args.disks:
        for host in Host.objects.all():
            host.options = {**host.options, "disk_limit": False}
            host.save(update_fields=["options"])
    ids: list[str] = []
    try:
        started = time.monotonic()
        create_sandboxes(principal, args.sandboxes, ids, args.threads, memory_mb=args.memory_mb)
        print(f"{len(ids)} sandboxes created in {time.monotonic() - started:.0f} s", flush=True)
        lines = measure(principal, ids)
    finally:
        started = time.monotonic()
        failures = delete_sandboxes(principal, ids, args.threads)
        swept = sweep_containers(instance)
        print(
            f"cleanup: {len(ids)} sandboxes deleted in {time.monotonic() - started:.0f} s, "
            f"{len(failures)} failed, {swept} containers swept"
        )
        remove_scratch(scratch)
    print("\n".join(lines))


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:  # main's finally has cleaned up by now
        raise SystemExit("interrupted; sandboxes deleted") from None
