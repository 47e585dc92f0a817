"""The `make run` layout for a bench: the web process as scripts/web.sh starts it (uvicorn,
one worker per core unless SANDHUB_WEB_WORKERS says otherwise) and a django-q2 cluster, both
on the bench's scratch database; the warm pool's state as the engine and the database show it;
the engine's own figures to compare with."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import _cpu
from _setup import ROOT, child_pids, free_port, stop_web, timings

READY_LINE = "running."  # django-q2 logs "Q Cluster <name> running." once it guards workers
AGENT_MARK = " -I -u -c "  # the agent's command line (hosts/backends/agent/protocol.py)


class Platform:
    """scripts/web.sh and `manage.py qcluster`, each in a process group of its own."""

    def __init__(self, scratch: Path) -> None:
        self.scratch = scratch
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp/"
        self.web: subprocess.Popen | None = None
        self.worker: subprocess.Popen | None = None

    @property
    def web_workers(self) -> int:
        return int(os.environ.get("SANDHUB_WEB_WORKERS") or os.cpu_count() or 1)

    def start(self) -> None:
        env = {**os.environ, "SANDHUB_BIND_PORT": str(self.port)}
        self.web = _spawn([str(ROOT / "scripts" / "web.sh")], env, self.scratch / "web.log")
        # INFO: django-q2 says "running." once its workers are up (nothing else waits on it).
        self.worker = _spawn(
            [sys.executable, "manage.py", "qcluster"],
            {**env, "LOG_LEVEL": "INFO"},
            self.scratch / "worker.log",
        )
        deadline = time.monotonic() + 60
        while not self._up():
            for process, log in ((self.web, "web.log"), (self.worker, "worker.log")):
                if process.poll() is not None:
                    tail = (self.scratch / log).read_text(errors="replace")[-2000:]
                    raise SystemExit(f"{log} process exited during start-up\n{tail}")
            if time.monotonic() > deadline:
                raise SystemExit("the platform did not start within 60 s")
            time.sleep(0.1)

    def _up(self) -> bool:
        log = self.scratch / "worker.log"
        if not log.exists() or READY_LINE not in log.read_text(errors="replace"):
            return False
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
        except OSError:
            return False
        return True

    def pids(self) -> dict[str, list[int]]:
        """The web processes and the worker's, by role (uvicorn's workers are its children,
        the cluster's are its children and theirs)."""
        web = [self.web.pid, *child_pids(self.web.pid)] if self.web else []
        worker = []
        if self.worker:
            worker = [self.worker.pid, *child_pids(self.worker.pid)]
            worker += [g for c in worker[1:] for g in child_pids(c)]
        return {"web": web, "worker": worker}

    def stop(self) -> None:
        for process in (self.web, self.worker):
            if process is not None:
                stop_web(process)  # SIGTERM to its group, SIGKILL if it lingers


def _spawn(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    with open(log, "ab") as output:
        return subprocess.Popen(
            argv,
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


# --- where the CPU went ----------------------------------------------------------------------

CONTAINERS_USAGE = _cpu.CGROUP_ROOT / "cpuacct" / "docker" / "cpuacct.usage"


def cpu_reading(platform: Platform) -> dict[str, float]:
    """CPU seconds so far: the machine's, the web processes', the worker's, the engine's and
    every container's (the sandboxes' agents and commands; other containers too)."""
    pids = platform.pids()
    containers = _cpu.cgroup_seconds(CONTAINERS_USAGE) if CONTAINERS_USAGE.exists() else 0.0
    return {
        "machine": _cpu.machine_busy(),
        "web": _cpu.pids_cpu(pids["web"]),
        "worker": _cpu.pids_cpu(pids["worker"]),
        "engine": _cpu.processes_cpu(_cpu.ENGINE_NAMES),
        "containers": containers,
    }


def cpu_line(before: dict[str, float], after: dict[str, float], clients: float, wall: float) -> str:
    spent = {name: after[name] - before[name] for name in before}
    parts = ", ".join(f"{name} {spent[name]:.1f}" for name in spent if name != "machine")
    return (
        f"  CPU in the burst ({wall:.1f} s, {wall * (os.cpu_count() or 1):.1f} core-seconds): "
        f"machine {spent['machine']:.1f} s; {parts}, clients {clients:.1f}"
    )


# --- the warm pool ----------------------------------------------------------------------------


def set_pool_size(size: int) -> None:
    from hosts.models import Image

    Image.objects.filter(is_default=True).update(warm_pool_size=size)


def fill_pool_here() -> None:
    """Refill in this process (set-up, untimed): the worker's own refill is what is measured."""
    from sandboxes import services
    from tenants.principal import Principal

    report = services.refill_warm_pools(Principal.system())
    if report.errors:
        raise SystemExit(f"refill failed: {report.errors}")


def ready_members() -> list[str]:
    """The container ids of the ready members."""
    from sandboxes.models import WarmContainer, WarmContainerStatus

    rows = WarmContainer.objects.filter(status=WarmContainerStatus.READY)
    return [row.backend_state.get("container_id", "") for row in rows]


def wait_for_pool(size: int, timeout: float) -> float | None:
    """Seconds until `size` members are ready (None: not within `timeout`)."""
    started = time.monotonic()
    while len(ready_members()) < size:
        if time.monotonic() - started > timeout:
            return None
        time.sleep(0.05)
    return time.monotonic() - started


def agents_in(container: str) -> int:
    """How many sandbox agents run in the container, as the engine lists its processes."""
    import docker
    from django.conf import settings

    client = docker.APIClient(base_url=settings.SANDHUB_DOCKER_URL, timeout=60)
    try:
        with contextlib.suppress(docker.errors.APIError):
            listing = client.top(container, ps_args="-o pid,args")
            return sum(AGENT_MARK in " ".join(p) for p in listing.get("Processes") or [])
    finally:
        client.close()
    return 0


def wait_for_agents(per_member: int, timeout: float) -> float | None:
    """Seconds until every ready member runs `per_member` agents (one per web process);
    None if that did not happen within `timeout`, or if after a few seconds no member runs
    any (a platform that keeps none)."""
    started = time.monotonic()
    while True:
        counts = {c: agents_in(c) for c in ready_members()}
        short = [c for c, n in counts.items() if n < per_member]
        if not short:
            return time.monotonic() - started
        waited = time.monotonic() - started
        if waited > timeout or (waited > 3.0 and not any(counts.values())):
            if any(counts.values()):
                listed = ", ".join(f"{c[:12]}: {counts[c]}" for c in short[:5])
                print(f"  ({len(short)} members without {per_member} agents: {listed})")
            return None
        time.sleep(0.1)


# --- the engine's own figures -----------------------------------------------------------------


def raw_engine(runs: int) -> tuple[list[float], list[float]]:
    """The engine alone, as the sandbox user, without network: (create + start + first exec
    `echo hi` of a container, an exec `echo hi` in a running one)."""
    import docker
    from django.conf import settings

    from hosts.backends.docker.names import SANDBOX_USER
    from sandboxes.housekeeping.config import instance_labels

    client = docker.DockerClient(base_url=settings.SANDHUB_DOCKER_URL, timeout=120)
    made = []

    def start_and_exec() -> None:
        container = client.containers.run(
            settings.SANDHUB_SANDBOX_IMAGE,
            ["sleep", "infinity"],
            detach=True,
            network_mode="none",
            user=SANDBOX_USER,
            labels={"org.sandhub.bench": "1", **instance_labels()},
        )
        made.append(container)
        container.exec_run(["echo", "hi"], user=SANDBOX_USER)

    try:
        start_and_exec()  # warm-up: the connection, the image's layers in the page cache
        cold = timings(runs, start_and_exec)
        running = made[0]
        running.exec_run(["echo", "hi"], user=SANDBOX_USER)
        warm = timings(runs, lambda: running.exec_run(["echo", "hi"], user=SANDBOX_USER))
    finally:
        for container in made:
            with contextlib.suppress(Exception):
                container.remove(force=True)
        client.close()
    return cold, warm
