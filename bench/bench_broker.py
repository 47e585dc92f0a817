"""django-q2's ORM broker on PostgreSQL: does it limit the platform's task throughput?

    DATABASE_URL=postgres://.../dev_a .venv/bin/python bench/bench_broker.py [--tasks 600]

(BENCH_POLL=0.05 tries another Q_CLUSTER poll.)

Migrates the database given (use a scratch one: it adds and leaves rows), starts two
`manage.py qcluster` processes on it (SANDHUB_WORKERS each, 2 by default; Q_CLUSTER as in
settings: poll 0.2 s, bulk 1) and measures, in one run:

- enqueue-to-start latency of a no-op task, one at a time (p50/p90): what a lone task waits;
- throughput of no-op tasks: --tasks queued at once, until all have their result saved;
- throughput of the platform's real periodic task mix (sweep, recover_background,
  sample_usage, refill_pools, probe_hosts on the local Docker engine), queued at once;
- baselines on the same database and machine: a raw queue of plain SQL (INSERT, then
  DELETE ... FOR UPDATE SKIP LOCKED RETURNING by two consumer connections), and a Python
  queue.Queue between threads;
- the idle cost of polling: CPU of the two idle clusters over a few seconds;
- what the platform enqueues under the 20-client load (worked out from the code: see
  `platform_enqueue_rate`), against the broker's measured throughput.

Figures are printed as ratios to the baselines; the last line says whether the broker limits.
"""

from __future__ import annotations

import argparse
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

from _setup import ROOT, child_pids, percentile

NOOP = "bench._broker_tasks.started_at"
READY_LINE = "running."  # django-q2 logs "Q Cluster <name> running." once it guards workers
MIX = [
    "sandboxes.tasks.sweep",
    "sandboxes.tasks.recover_background",
    "sandboxes.tasks.sample_usage",
    "sandboxes.tasks.refill_pools",
    "sandboxes.tasks.probe_hosts",
]


def setup_django() -> None:
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith("postgres"):
        raise SystemExit("set DATABASE_URL to a scratch PostgreSQL database")
    sys.path.insert(0, str(ROOT))
    os.environ["DJANGO_SETTINGS_MODULE"] = "bench._broker_settings"  # every result kept
    import django
    from django.core.management import call_command

    django.setup()
    import logging

    logging.getLogger("django-q").setLevel(logging.WARNING)  # not a line per enqueue
    call_command("migrate", verbosity=0)
    from django_q.models import OrmQ, Schedule, Task

    Schedule.objects.all().delete()  # no periodic tasks mixed into the figures
    OrmQ.objects.all().delete()
    Task.objects.all().delete()
    from django.conf import settings

    from hosts.models import Host

    Host.objects.get_or_create(
        name="bench-local", defaults={"kind": "docker", "endpoint": settings.SANDHUB_DOCKER_URL}
    )


def start_clusters(count: int, scratch: Path) -> list[subprocess.Popen]:
    clusters = []
    for n in range(count):
        log = open(scratch / f"qcluster{n}.log", "wb")  # noqa: SIM115 (kept open with it)
        clusters.append(
            subprocess.Popen(
                [sys.executable, "manage.py", "qcluster"],
                cwd=ROOT,
                env={**os.environ, "LOG_LEVEL": "INFO"},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
    deadline = time.monotonic() + 90
    logs = [scratch / f"qcluster{n}.log" for n in range(count)]
    while not all(READY_LINE in log.read_text(errors="replace") for log in logs):
        if time.monotonic() > deadline or any(c.poll() is not None for c in clusters):
            stop_clusters(clusters)
            raise SystemExit("the clusters did not start")
        time.sleep(0.2)
    return clusters


def stop_clusters(clusters: list[subprocess.Popen]) -> None:
    import signal

    for process in clusters:
        os.killpg(process.pid, signal.SIGTERM)
    for process in clusters:
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)


def wait_results(ids: list[str], timeout: float) -> dict[str, object]:
    from django_q.models import Task

    deadline = time.monotonic() + timeout
    while True:
        done = dict(Task.objects.filter(id__in=ids).values_list("id", "result"))
        if len(done) == len(ids) or time.monotonic() > deadline:
            return done
        time.sleep(0.02)


def latency(runs: int) -> list[float]:
    from django_q.tasks import async_task

    waits = []
    for _ in range(runs):
        sent = time.time()
        task = async_task(NOOP, sent)
        result = wait_results([task], 30).get(task)
        if isinstance(result, float):
            waits.append(result - sent)
    return waits


def throughput(funcs: list[str], count: int) -> tuple[float, int]:
    """Tasks per second from the first enqueue until every result is saved (counted, every
    0.1 s, by one cheap query: the bench's own looks must not be the load)."""
    from django_q.models import Task
    from django_q.tasks import async_task

    before = Task.objects.filter(func__in=funcs).count()
    began = time.perf_counter()
    for n in range(count):
        func = funcs[n % len(funcs)]
        async_task(func, time.time()) if func == NOOP else async_task(func)
    deadline = time.monotonic() + 600
    done = 0
    while done < count and time.monotonic() < deadline:
        time.sleep(0.1)
        done = Task.objects.filter(func__in=funcs).count() - before
    return done / (time.perf_counter() - began), done


def raw_sql_rate(count: int) -> float:
    """INSERT by one connection, DELETE ... SKIP LOCKED RETURNING by two consumers."""
    import psycopg
    from django.db import connection

    url = os.environ["DATABASE_URL"].replace("postgres://", "postgresql://", 1)
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE IF NOT EXISTS bench_rawq (id bigserial PRIMARY KEY, p text)")
        cursor.execute("TRUNCATE bench_rawq")
    taken = [0]
    lock = threading.Lock()

    def consume() -> None:
        with psycopg.connect(url, autocommit=True) as conn:
            while True:
                with lock:
                    if taken[0] >= count:
                        return
                row = conn.execute(
                    "DELETE FROM bench_rawq WHERE id = (SELECT id FROM bench_rawq ORDER BY id "
                    "FOR UPDATE SKIP LOCKED LIMIT 1) RETURNING id"
                ).fetchone()
                if row is not None:
                    with lock:
                        taken[0] += 1

    # Consumers poll as they go, the producer inserts: a queue's round trip, both sides busy.
    began = time.perf_counter()
    consumers = [threading.Thread(target=consume) for _ in range(2)]
    for consumer in consumers:
        consumer.start()
    with psycopg.connect(url, autocommit=True) as conn:
        for n in range(count):
            conn.execute("INSERT INTO bench_rawq (p) VALUES (%s)", (f"task {n}",))
    for consumer in consumers:
        consumer.join()
    rate = count / (time.perf_counter() - began)
    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE bench_rawq")
    return rate


def python_queue_rate(count: int) -> float:
    q: queue.Queue[int] = queue.Queue()
    began = time.perf_counter()
    consumer = threading.Thread(target=lambda: [q.get() for _ in range(count)])
    consumer.start()
    for n in range(count):
        q.put(n)
    consumer.join()
    return count / (time.perf_counter() - began)


def idle_cpu(clusters: list[subprocess.Popen], seconds: float) -> float:
    """CPU share (of one core) of the idle clusters, all their processes, while they poll."""
    ticks = os.sysconf("SC_CLK_TCK")

    def total() -> float:
        used = 0
        for root in clusters:
            for pid in [root.pid, *child_pids(root.pid)]:
                try:
                    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                used += int(fields[11]) + int(fields[12])
        return used / ticks

    before = total()
    time.sleep(seconds)
    return (total() - before) / seconds


def platform_enqueue_rate(clients: int = 20) -> float:
    """Tasks per second the platform queues under the scale-out load, from the code:

    - each background job: its supervisor, then a continuation every SLICE_SECONDS
      (sandboxes/tasks.py); the load keeps about one job per client running: clients / 20 s,
      plus its start (one per job; jobs of ~10 s: clients / 10 s);
    - a create from the warm pool queues refill_pools (poolfill.py): say one create per
      client every 30 s;
    - the schedules: sweep, probe_hosts, sample_usage, refill_pools, recover_background each
      minute, reconcile every 5: 5.2 a minute.
    """
    from sandboxes import tasks

    return clients / tasks.SLICE_SECONDS + clients / 10 + clients / 30 + 5.2 / 60


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=600)
    parser.add_argument("--mix", type=int, default=150)
    parser.add_argument("--latency-runs", type=int, default=40)
    args = parser.parse_args()
    setup_django()
    import tempfile

    from django_q.conf import Conf

    scratch = Path(tempfile.mkdtemp(prefix="sandhub-broker-"))
    clusters = start_clusters(2, scratch)
    try:
        cpu = idle_cpu(clusters, 5.0)
        waits = latency(args.latency_runs)
        noop_rate, noop_done = throughput([NOOP], args.tasks)
        mix_rate, mix_done = throughput(MIX, args.mix)
    finally:
        stop_clusters(clusters)
    raw = raw_sql_rate(args.tasks * 4)
    pyq = python_queue_rate(100_000)
    need = platform_enqueue_rate()
    workers = 2 * int(Conf.WORKERS)
    print(
        f"ORM broker on PostgreSQL, 2 clusters x {Conf.WORKERS} workers, poll {Conf.POLL} s, "
        f"bulk {Conf.BULK}"
    )
    print(
        f"enqueue-to-start, lone no-op: p50 {percentile(waits, 50) * 1000:.0f} ms, "
        f"p90 {percentile(waits, 90) * 1000:.0f} ms (n={len(waits)}; poll/2 = "
        f"{Conf.POLL * 500:.0f} ms)"
    )
    print(f"no-op throughput: {noop_rate:.0f} tasks/s ({noop_done}/{args.tasks} done)")
    print(
        f"real task mix throughput: {mix_rate:.1f} tasks/s ({mix_done}/{args.mix} done, "
        f"{workers} workers)"
    )
    print(
        f"raw SQL queue (INSERT + SKIP LOCKED DELETE, 2 consumers): {raw:.0f}/s; "
        f"ORM broker no-op = {noop_rate / raw:.2f}x raw"
    )
    print(f"python queue.Queue: {pyq:.0f}/s; ORM broker no-op = {noop_rate / pyq:.5f}x")
    print(f"idle polling: {cpu * 100:.1f}% of one core for both clusters")
    print(
        f"the 20-client load enqueues ~{need:.1f} tasks/s: {noop_rate / need:.0f}x headroom "
        f"on no-ops, {mix_rate / need:.1f}x on the real mix"
    )
    limits = noop_rate < 3 * need
    verdict = "LIMITS" if limits else "does not limit"
    print(f"conclusion: the ORM broker {verdict} throughput at this load")


if __name__ == "__main__":
    main()
