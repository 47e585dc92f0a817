"""The sandbox agent against the engine's own exec, on the local Docker engine, in one run.

    .venv/bin/python bench/bench_agent.py [--raw 50] [--agent 500] [--seconds 10]

Prints, from the same run: `echo hi` by a raw `docker exec_run` (sequential) and through the
agent (sequential), median and p95; the agent's throughput with 20 threads on 20 sandboxes
beside the engine's exec throughput with 10 threads (one sandbox each); the ratios; and what
the platform process holds for the idle agents.
Figures on these machines vary between days: compare the ratios of one run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable

from _setup import ROOT, summary


def setup_django() -> None:
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "platform_site.settings")
    import django

    django.setup()


def rss() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def timings(count: int, action: Callable[[], object]) -> list[float]:
    seconds = []
    for _ in range(count):
        started = time.perf_counter()
        action()
        seconds.append(time.perf_counter() - started)
    return seconds


def throughput(actions: list[Callable[[], object]], duration: float) -> tuple[float, int]:
    """Each action in a thread of its own, as often as it can for `duration` seconds."""
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--raw", type=int, default=50)
    parser.add_argument("--agent", type=int, default=500)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--sandboxes", type=int, default=20)
    args = parser.parse_args()
    setup_django()

    import docker
    from django.conf import settings

    from hosts.backends.base import SandboxSpec
    from hosts.backends.docker import DockerBackend
    from hosts.backends.docker.agent import agent_link
    from hosts.backends.docker.names import SANDBOX_USER, container_ref
    from hosts.models import Host

    backend = DockerBackend(Host(name="bench", kind="docker", endpoint=settings.SANDHUB_DOCKER_URL))
    engine = docker.DockerClient(base_url=settings.SANDHUB_DOCKER_URL, timeout=120)
    link = agent_link(backend.engine)
    prefix = f"bench-agent-{uuid.uuid4().hex[:6]}-"
    states = []
    try:
        for number in range(args.sandboxes):
            spec = SandboxSpec(
                sandbox_id=f"{prefix}{number}",
                image_reference=settings.SANDHUB_SANDBOX_IMAGE,
                cpus=1.0,
                memory_mb=256,
                pids_limit=256,
                network=False,
                labels={"org.sandhub.bench": "1"},
            )
            states.append(backend.provision(spec))
        containers = [engine.containers.get(container_ref(state)) for state in states]

        def raw(index: int) -> Callable[[], object]:
            return lambda: containers[index].exec_run(["echo", "hi"], user=SANDBOX_USER)

        def agent(index: int) -> Callable[[], object]:
            state = states[index]
            return lambda: link.exec(
                state, ["echo", "hi"], cwd="/workspace", env={}, timeout=30, output_cap=65536
            )

        rss_before = rss()
        for index in range(len(states)):  # agents up before anything is timed
            agent(index)()
        rss_agents = rss() - rss_before
        raw(0)()
        raw_times = timings(args.raw, raw(0))
        agent_times = timings(args.agent, agent(0))
        agent_rate, agent_errors = throughput([agent(i) for i in range(len(states))], args.seconds)
        raw_threads = min(10, len(states))
        raw_rate, raw_errors = throughput([raw(i) for i in range(raw_threads)], args.seconds)
    finally:
        link.close()
        for state in states:
            backend.destroy(state)
        backend.close()
        engine.close()

    raw_median, agent_median = statistics.median(raw_times), statistics.median(agent_times)
    print(summary("raw docker exec_run `echo hi` (sequential)", raw_times))
    print(summary("agent `echo hi` (sequential)", agent_times))
    print(
        f"{'agent p50 / raw p50':<44} {agent_median / raw_median:.3f}"
        f"   (raw is {raw_median / agent_median:.0f}x slower)"
    )
    print(
        f"{f'agent throughput, {len(states)} threads on {len(states)} sandboxes':<44} "
        f"{agent_rate:7.1f} commands/s   errors {agent_errors}"
    )
    print(
        f"{f'engine exec throughput, {raw_threads} threads':<44} "
        f"{raw_rate:7.1f} execs/s      errors {raw_errors}"
    )
    print(f"{'agent / engine throughput':<44} {agent_rate / raw_rate:.1f}x")
    print(
        f"{f'platform RSS for {len(states)} idle agents':<44} +{rss_agents / 2**20:.1f} MiB"
        f"   ({rss_agents / len(states) / 1024:.0f} KiB each)"
    )


if __name__ == "__main__":
    main()
