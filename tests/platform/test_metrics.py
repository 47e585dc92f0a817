"""/metrics' content (issue 28): the database's state as gauges that match it, the command
latency histogram after real commands on the in-memory backend, the exposition parsed as
Prometheus parses it, and what a scrape costs with 100 sandboxes. The endpoint itself (its
token, the live counters) is tests/platform/test_metrics_live.py; who may read it,
tests/security/test_metrics_access.py."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from django_q.models import OrmQ, Task

from hosts.models import Host, Image
from platform_site.env import EnvError, env_token
from platform_site.metrics.exposition import scrape
from sandboxes import services
from sandboxes.models import EgressRefusal, Sandbox, WarmContainer
from tests.platform.metrics_helpers import samples, series, value

ROOT = Path(__file__).resolve().parents[2]
QUERY_BUDGET = 8  # the collector's aggregate queries, whatever the number of sandboxes


def _sandbox(team, host, image, status: str) -> Sandbox:
    return Sandbox.objects.create(
        team=team, host=host, image=image, status=status, cpus=1, memory_mb=256, pids_limit=64
    )


def _failed_task() -> None:
    now = timezone.now()
    Task.objects.create(
        id=uuid.uuid4().hex, name="t", func="math.floor", started=now, stopped=now, success=False
    )


@pytest.fixture
def two_teams_two_hosts(team_a, team_b, docker_host, image):
    remote = Host.objects.create(
        name="remote", kind="ssh", endpoint="127.0.0.1:22", idle_score=0.25, healthy=False
    )
    Host.objects.filter(pk=docker_host.pk).update(idle_score=0.75, max_sandboxes=7)
    for _ in range(3):
        _sandbox(team_a, docker_host, image, "running")
    _sandbox(team_b, docker_host, image, "running")
    _sandbox(team_b, docker_host, image, "paused")
    _sandbox(team_a, remote, image, "stopped")
    _sandbox(team_b, None, image, "pending")
    _sandbox(team_b, remote, image, "deleted")  # not counted: gone
    Image.objects.filter(pk=image.pk).update(warm_pool_size=2)
    WarmContainer.objects.create(host=docker_host, image=image, slot=0, status="ready")
    WarmContainer.objects.create(host=docker_host, image=image, slot=1, status="provisioning")
    WarmContainer.objects.create(host=docker_host, image=image, status="claimed")
    for n in range(4):
        OrmQ.objects.create(key="sandhub", payload=f"p{n}")
    _failed_task()
    _failed_task()
    sandbox = Sandbox.objects.filter(team=team_b, status="running").get()
    now = timezone.now()
    for destination, reason, count in (
        ("a.test:443", "not_allowed", 5),
        ("1.2.3.4:80", "raw_ip", 2),
    ):
        EgressRefusal.objects.create(
            sandbox=sandbox,
            destination=destination,
            reason=reason,
            count=count,
            first_at=now,
            last_at=now,
        )
    EgressRefusal.objects.create(
        sandbox=sandbox,
        destination="b.test:443",
        reason="not_allowed",
        count=1,
        first_at=now,
        last_at=now,
    )
    return docker_host, remote


def test_gauges_match_the_database(two_teams_two_hosts):
    found = samples(scrape()[0])
    assert series(found, "sandhub_sandboxes") == {
        frozenset({"status": "running", "host": "local"}.items()): 4.0,
        frozenset({"status": "paused", "host": "local"}.items()): 1.0,
        frozenset({"status": "stopped", "host": "remote"}.items()): 1.0,
        frozenset({"status": "pending", "host": "none"}.items()): 1.0,
    }
    assert value(found, "sandhub_host_idle_score", host="local", kind="docker") == 0.75
    assert value(found, "sandhub_host_idle_score", host="remote", kind="ssh") == 0.25
    assert value(found, "sandhub_host_healthy", host="local", kind="docker") == 1.0
    assert value(found, "sandhub_host_healthy", host="remote", kind="ssh") == 0.0
    assert value(found, "sandhub_host_accepting", host="local", kind="docker") == 1.0
    assert value(found, "sandhub_host_max_sandboxes", host="local", kind="docker") == 7.0
    # The unhealthy host gets no pool (as poolfill.refill): only local's target.
    assert series(found, "sandhub_pool_target") == {
        frozenset({"host": "local", "image": "python"}.items()): 2.0
    }
    assert series(found, "sandhub_pool_members") == {
        frozenset({"host": "local", "image": "python", "state": "ready"}.items()): 1.0,
        frozenset({"host": "local", "image": "python", "state": "provisioning"}.items()): 1.0,
    }
    assert value(found, "sandhub_queue_tasks") == 4.0
    assert value(found, "sandhub_queue_failed_tasks") == 2.0
    assert value(found, "sandhub_egress_refusals", reason="not_allowed") == 6.0
    assert value(found, "sandhub_egress_refusals", reason="raw_ip") == 2.0


def test_no_tenant_name_in_any_label(two_teams_two_hosts, team_a, team_b):
    text = scrape()[0].decode()
    for name in (team_a.slug, team_b.slug, team_a.name, "a.test", "1.2.3.4"):
        assert name not in text


def test_a_scrape_with_100_sandboxes_costs_a_few_queries(team_a, team_b, docker_host, image):
    for n in range(100):
        _sandbox(team_a if n % 2 else team_b, docker_host, image, "running")
    with CaptureQueriesContext(connection) as queries:
        started = time.perf_counter()
        body, content_type = scrape()
        took = time.perf_counter() - started
    assert content_type.startswith("text/plain; version=0.0.4")  # no Accept header
    assert value(samples(body), "sandhub_sandboxes", status="running", host="local") == 100.0
    assert len(queries) <= QUERY_BUDGET, [q["sql"] for q in queries.captured_queries]
    print(f"scrape with 100 sandboxes: {len(queries)} queries, {took * 1000:.1f} ms")


def _command_count(found, outcome: str) -> float:
    return value(found, "sandhub_command_duration_seconds_count", backend="docker", outcome=outcome)


def test_commands_land_in_the_latency_histogram(fake_backend, as_alice):
    sandbox = services.create_sandbox(as_alice)
    before = samples(scrape()[0])
    services.run_command(as_alice, sandbox.id, "echo hello")
    services.run_command(as_alice, sandbox.id, "exit 3")
    after = samples(scrape()[0])
    assert _command_count(after, "succeeded") - _command_count(before, "succeeded") == 1
    assert _command_count(after, "failed") - _command_count(before, "failed") == 1
    # Every observation lands in the +Inf bucket, and the sum grows.
    labels = {"backend": "docker", "outcome": "succeeded"}
    grew = value(after, "sandhub_command_duration_seconds_bucket", **labels, le="+Inf") - value(
        before, "sandhub_command_duration_seconds_bucket", **labels, le="+Inf"
    )
    assert grew == 1
    assert value(after, "sandhub_command_duration_seconds_sum", **labels) > value(
        before, "sandhub_command_duration_seconds_sum", **labels
    )


@pytest.mark.parametrize("raw", ["short", "x" * 31, "a" * 20 + " " + "b" * 20])
def test_a_weak_metrics_token_is_refused_at_start(monkeypatch, raw):
    monkeypatch.setenv("SANDHUB_METRICS_TOKEN", raw)
    with pytest.raises(EnvError, match="SANDHUB_METRICS_TOKEN"):
        env_token("SANDHUB_METRICS_TOKEN")


def test_an_unset_metrics_token_is_off(monkeypatch):
    monkeypatch.delenv("SANDHUB_METRICS_TOKEN", raising=False)
    assert env_token("SANDHUB_METRICS_TOKEN") == ""
    monkeypatch.setenv("SANDHUB_METRICS_TOKEN", "k" * 40)
    assert env_token("SANDHUB_METRICS_TOKEN") == "k" * 40


WRITER = """
import sys
from sandboxes.metrics import instruments
for _ in range(int(sys.argv[1])):
    instruments.http_request("GET", "pages", 200, 0.01)
    instruments.mcp_call("list_sandboxes", "ok", 0.02)
"""


def test_two_processes_writing_to_one_directory_are_summed(
    tmp_path, monkeypatch, docker_host, image, team_a
):
    """Multiprocess mode: what two processes counted, in files of one directory, is read back
    as their sum by whichever process answers; the database's gauges are added once."""
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    for count in (3, 5):
        subprocess.run([sys.executable, "-c", WRITER, str(count)], env=env, cwd=ROOT, check=True)
    assert len(list(tmp_path.glob("counter_*.db"))) == 2  # a file per process
    _sandbox(team_a, docker_host, image, "running")
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    found = samples(scrape()[0])
    requests = {"method": "read", "route": "pages", "status": "2xx"}
    assert value(found, "sandhub_http_requests_total", **requests) == 8
    assert value(found, "sandhub_http_request_duration_seconds_count", route="pages") == 8
    assert value(found, "sandhub_mcp_tool_calls_total", tool="list_sandboxes", outcome="ok") == 8
    assert value(found, "sandhub_sandboxes", status="running", host="local") == 1
