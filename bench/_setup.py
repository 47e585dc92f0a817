"""Shared set-up for bench scripts: a throwaway SQLite database, one team, user, host, image."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
FLOOR_APP = "bench._floor_app:application"  # FastMCP's do-nothing tool, nothing of Sandhub


def django_on_scratch_db() -> Path:
    """Configure Django on a fresh SQLite file so a bench never touches real data.

    DATABASE_URL is set in this process's environment, so a web process started afterwards
    (start_web) uses the same file. Returns the scratch directory (remove it when done).
    """
    sys.path.insert(0, str(ROOT))
    scratch = Path(tempfile.mkdtemp(prefix="sandhub-bench-"))
    os.environ["DATABASE_URL"] = f"sqlite:///{scratch / 'bench.sqlite3'}"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "platform_site.settings")
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    return scratch


def bench_principal(channel: str = "web"):
    from django.conf import settings
    from django.contrib.auth import get_user_model

    from hosts.models import Host, Image
    from tenants.models import Membership, Role, Team
    from tenants.principal import Principal

    team, _ = Team.objects.get_or_create(
        slug="bench", defaults={"name": "Bench", "max_running_sandboxes": 1000}
    )
    user, _ = get_user_model().objects.get_or_create(username="bench")
    Membership.objects.get_or_create(user=user, team=team, defaults={"role": Role.OWNER})
    Host.objects.get_or_create(
        name="local", defaults={"kind": "docker", "endpoint": settings.SANDHUB_DOCKER_URL}
    )
    Image.objects.get_or_create(
        name="python", defaults={"reference": settings.SANDHUB_SANDBOX_IMAGE, "is_default": True}
    )
    return Principal(user=user, team=team, channel=channel)


def summary(label: str, seconds: list[float]) -> str:
    ordered = sorted(seconds)
    p95 = ordered[max(0, round(0.95 * len(ordered)) - 1)]
    return (
        f"{label:<44} n={len(ordered):<4} median {statistics.median(ordered) * 1000:7.1f} ms"
        f"   p95 {p95 * 1000:7.1f} ms"
    )


# --- helpers shared by bench_load, bench_idle_agents and bench_pool ---------------------------


def bench_instance() -> str:
    """A SANDHUB_INSTANCE of this run's own, set in the environment before Django starts: the
    web process inherits it, and sweep_containers removes only what this run made."""
    name = f"bench-{os.getpid()}-{int(time.time()) % 100000}"
    os.environ["SANDHUB_INSTANCE"] = name
    return name


def remove_scratch(scratch: Path | None) -> None:
    if scratch is not None:
        shutil.rmtree(scratch, ignore_errors=True)


def percentile(seconds: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    ordered = sorted(seconds)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_web(
    port: int,
    workers: int = 1,
    log: Path | None = None,
    app: str = "platform_site.asgi:application",
) -> subprocess.Popen:
    """uvicorn on `app`, platform_site.asgi by default (as scripts/run.sh starts it), with
    `workers` processes, in its own process group so stop_web reaches the workers too; this
    process's environment (DATABASE_URL, SANDHUB_*) is inherited. `log`: a file for its
    output (say, fastmcp's line per notification sent), instead of this terminal."""
    output = open(log, "ab") if log is not None else None  # noqa: SIM115 (the child keeps it)
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            app,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            str(workers),
            "--log-level",
            "warning",
        ],
        cwd=ROOT,
        env=dict(os.environ),
        start_new_session=True,
        stdout=output,
        stderr=output,
    )
    if output is not None:
        output.close()  # the child has its own descriptor
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return server
        except OSError:
            if server.poll() is not None:
                tail = log.read_text(errors="replace")[-2000:] if log is not None else ""
                raise SystemExit(f"uvicorn exited during start-up\n{tail}") from None
            time.sleep(0.1)
    stop_web(server)
    raise SystemExit("uvicorn did not start")


def stop_web(server: subprocess.Popen) -> None:
    """SIGTERM to the server's process group (supervisor and workers), SIGKILL if it lingers."""
    if server.poll() is not None:
        return
    try:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait(timeout=10)
    except ProcessLookupError:
        pass


def child_pids(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    try:
        return [int(child) for child in path.read_text().split()]
    except OSError:
        return []


def proc_status(field: str, pid: int | str = "self") -> int:
    """A number from /proc/<pid>/status (VmRSS in bytes, Threads as is); 0 if gone."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith(f"{field}:"):
                    parts = line.split()
                    return int(parts[1]) * (1024 if parts[-1] == "kB" else 1)
    except OSError:
        pass
    return 0


def timings(count: int, action: Callable[[], object]) -> list[float]:
    seconds = []
    for _ in range(count):
        started = time.perf_counter()
        action()
        seconds.append(time.perf_counter() - started)
    return seconds


def thread_throughput(actions: list[Callable[[], object]], duration: float) -> tuple[float, int]:
    """Each action in a thread of its own, as often as it can for `duration` seconds: calls per
    second over all threads, and how many raised."""
    done, errors = [0] * len(actions), [0] * len(actions)
    stop = time.monotonic() + duration

    def loop(index: int) -> None:
        while time.monotonic() < stop:
            try:
                actions[index]()
                done[index] += 1
            except Exception:
                errors[index] += 1

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(len(actions))]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(done) / (time.monotonic() - started), sum(errors)


def in_threads(function: Callable[[Any], Any], items: list[Any], threads: int) -> list[Any]:
    """function(item) for every item on `threads` threads, each closing its database
    connection when done; results in order, an exception where a call raised."""
    from django.db import connection

    def call(item: Any) -> Any:
        try:
            return function(item)
        except Exception as exc:
            return exc
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
        return list(pool.map(call, items))


def create_sandboxes(
    principal, count: int, made: list[str], threads: int = 4, **options: Any
) -> None:
    """`count` sandboxes through the service layer, a few at a time. Each id is appended to
    `made` as soon as it exists, so a caller's finally deletes them even after Ctrl-C or an
    error; the first failure is raised once the others are done."""
    from sandboxes import services

    def create(_: object) -> None:
        made.append(services.create_sandbox(principal, **options).id)

    failures = [item for item in in_threads(create, [None] * count, threads) if item]
    if failures:
        raise failures[0]


def delete_sandboxes(principal, ids: list[str], threads: int = 4) -> list[Exception]:
    """Delete through the service layer, a few at a time; the errors (not raised)."""
    from sandboxes import services

    done = in_threads(lambda sid: services.delete_sandbox(principal, sid), ids, threads)
    return [item for item in done if isinstance(item, Exception)]


def sweep_containers(instance: str) -> int:
    """Remove everything this run's instance label still marks (a sandbox whose deletion
    failed, a pool member left behind): its container, volume, disk, network and snapshot
    files, through the backend's own listing, as reconciliation removes orphans (a container
    removed alone left its loop-mounted disk behind). The last resort of a bench's cleanup;
    the number of sandboxes or members swept."""
    from collections import defaultdict

    from hosts.backends import get_backend
    from hosts.models import Host

    swept = 0
    for host in Host.objects.filter(kind="docker"):
        backend = get_backend(host)
        groups = defaultdict(list)
        for resource in backend.list_managed():
            if resource.instance == instance:
                groups[resource.label_id].append(resource)
        for group in groups.values():
            for resource in sorted(group, key=lambda r: r.kind != "container"):
                if resource.kind == "snapshot":
                    backend.delete_snapshot(resource.state)
                else:
                    backend.destroy(resource.state)
            swept += 1
    return swept


def lift_creation_limits() -> None:
    """Creation rate limits far above what a bench makes (before Django starts; the web
    process inherits them): a bench measures speed, not the limiter."""
    os.environ["SANDHUB_SANDBOX_CREATES_PER_KEY"] = "1000000"
    os.environ["SANDHUB_SANDBOX_CREATES_PER_ADDRESS"] = "1000000"


def make_room(principal, sandboxes: int) -> None:
    """Team quota and host capacity for `sandboxes` sandboxes at once (a host takes 20 by
    default)."""
    from hosts.models import Host
    from tenants.models import Team

    room = sandboxes + 10
    Team.objects.filter(pk=principal.team.pk, max_running_sandboxes__lt=room).update(
        max_running_sandboxes=room
    )
    Host.objects.filter(max_sandboxes__lt=room).update(max_sandboxes=room)
