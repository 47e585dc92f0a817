"""A command the OOM killer took says so (real Docker engine, a 128 MB sandbox): exit 137 plus
a line in stderr naming the limit, and `out_of_memory` in the result; for a background job
the line ends its log. A plain `kill -9` is exit 137 with no such word."""

from __future__ import annotations

import time

import pytest

from sandboxes import services
from sandboxes.contract.outcomes import OOM_NOTE
from sandboxes.models import Sandbox

pytestmark = pytest.mark.docker
GREEDY = "python3 -c 'b = [bytearray(16 << 20) for _ in range(64)]'"  # 1 GB, 16 MB at a time


@pytest.fixture
def small_sandbox(transactional_db, real_docker, as_alice):
    info = services.create_sandbox(as_alice, memory_mb=128)
    yield info.id
    if Sandbox.objects.get(public_id=info.id).status != "deleted":
        services.delete_sandbox(as_alice, info.id)


def test_a_command_killed_for_memory_says_so(small_sandbox, as_alice):
    result = services.run_command(as_alice, small_sandbox, GREEDY)
    assert result.exit_code == 137, result
    assert OOM_NOTE in result.stderr and "(limit 128 MB)" in result.stderr, result.stderr
    assert result.out_of_memory is True
    # The sandbox goes on, and a plain SIGKILL is not called a lack of memory.
    killed = services.run_command(as_alice, small_sandbox, "echo before; kill -9 $$")
    assert (killed.exit_code, killed.stdout) == (137, "before\n")
    assert OOM_NOTE not in killed.stderr and killed.out_of_memory is False


def test_a_background_job_killed_for_memory_says_so(small_sandbox, as_alice):
    started = services.start_background(as_alice, small_sandbox, f"echo start; {GREEDY}")
    plain = services.start_background(as_alice, small_sandbox, "echo start; kill -9 $$")
    checks = {}
    deadline = time.monotonic() + 60
    while len(checks) < 2:
        for job in (started, plain):
            check = services.check_background(as_alice, small_sandbox, job.id)
            if not check.running:
                checks[job.id] = check
        assert time.monotonic() < deadline, "the jobs did not end"
        time.sleep(0.2)
    oom, killed = checks[started.id], checks[plain.id]
    assert oom.exit_code == 137 and oom.output.startswith("start\n"), oom
    assert oom.output.rstrip().endswith("use a bigger sandbox or less memory"), oom.output
    assert OOM_NOTE in oom.output and oom.out_of_memory is True
    assert killed.exit_code == 137 and OOM_NOTE not in killed.output, killed
    assert killed.out_of_memory is False
