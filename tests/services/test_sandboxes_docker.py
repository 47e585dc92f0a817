"""The service layer end to end on the real Docker engine: what a member does with a
sandbox, limits that hold, tenancy, and nothing left behind."""

from __future__ import annotations

import re
import resource

import docker
import pytest

from hosts.backends.execscripts import NOTICE_PREFIX, NOTICE_START, Notice
from sandboxes import services
from sandboxes.contract.errors import BackendFailure, InvalidInput, NotFound, QuotaExceeded
from sandboxes.contract.results import UploadFile
from sandboxes.models import CommandExecution, Sandbox
from tenants.models import AuditLog

pytestmark = [pytest.mark.docker, pytest.mark.django_db]


@pytest.fixture(scope="module")
def engine():
    client = docker.from_env()
    yield client
    client.close()


def containers_of(engine, sandbox_id: str) -> list:
    return engine.containers.list(all=True, filters={"label": f"org.sandhub.sandbox={sandbox_id}"})


def volume_exists(engine, sandbox_id: str) -> bool:
    return any(v.name == f"sandhub-{sandbox_id}" for v in engine.volumes.list())


@pytest.fixture
def sandbox(real_docker, as_alice, engine):
    info = services.create_sandbox(as_alice, memory_mb=256)
    yield info
    if Sandbox.objects.get(public_id=info.id).status != "deleted":
        services.delete_sandbox(as_alice, info.id)
    assert containers_of(engine, info.id) == []


def test_member_workflow_end_to_end(real_docker, as_alice, engine):
    info = services.create_sandbox(as_alice, name="e2e", memory_mb=256)
    assert info.status == "running" and len(containers_of(engine, info.id)) == 1

    echo = services.run_command(as_alice, info.id, "echo hello from $(whoami)")
    assert (echo.exit_code, echo.stdout) == (0, "hello from sandbox\n")

    services.write_file(as_alice, info.id, "notes/readme.txt", "first line\n")
    assert services.read_file(as_alice, info.id, "notes/readme.txt").content == b"first line\n"

    binary = bytes(range(256)) * 1000
    uploads = [
        UploadFile("proj/main.py", b"import sys\nprint(sum(map(int, sys.argv[1:])))\n"),
        UploadFile("proj/data.bin", binary),
        UploadFile("proj/empty.txt", b""),
    ]
    services.upload_files(as_alice, info.id, uploads)
    downloaded = dict(services.download_files(as_alice, info.id, ["proj"]))
    assert downloaded == {"/workspace/" + u.path: u.content for u in uploads}
    owner = services.run_command(as_alice, info.id, "stat -c %U proj/data.bin").stdout
    assert owner == "sandbox\n"

    py = services.run_python(as_alice, info.id, "import platform; print(platform.python_version())")
    assert py.exit_code == 0 and py.stdout.startswith("3.")
    assert services.run_command(as_alice, info.id, "python3 proj/main.py 2 3").stdout == "5\n"

    streamed = b"".join(services.open_file_stream(as_alice, info.id, "proj/data.bin"))
    assert streamed == binary

    services.delete_sandbox(as_alice, info.id)
    assert containers_of(engine, info.id) == []
    assert not volume_exists(engine, info.id)


def test_timeout_kills_the_process_inside(sandbox, as_alice):
    result = services.run_command(as_alice, sandbox.id, "sleep 600", timeout=2)
    assert result.status == "timed_out" and result.duration_seconds < 8
    left = services.run_command(as_alice, sandbox.id, "ps -eo args | grep -c '^sleep 600' || true")
    assert left.stdout.strip() == "0"
    assert CommandExecution.objects.filter(status="timed_out").count() == 1


def test_huge_output_is_capped_and_memory_stays_bounded(sandbox, as_alice):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    result = services.run_command(as_alice, sandbox.id, "head -c 50000000 /dev/zero | tr '\\0' x")
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert result.stdout_truncated and result.stdout_bytes == 50_000_000
    assert len(result.stdout) < 1_100_000
    assert grown_mb < 25, f"platform memory grew by {grown_mb:.0f} MB"


BOMB = "bomb() { bomb | bomb & }; bomb"


@pytest.fixture(params=[False, True], ids=["per-command-exec", "agent"])
def command_path(request, settings):
    """Both ways a command reaches a Docker sandbox: one engine exec through the wrapper
    (hosts/backends/execscripts.py), and the sandbox agent where the backend uses one."""
    settings.SANDHUB_AGENT = request.param
    return request.param


def test_fork_bomb_and_memory_hog_are_contained(real_docker, as_alice, sandbox):
    neighbour = services.create_sandbox(as_alice, memory_mb=128)
    try:
        bomb = services.run_command(as_alice, sandbox.id, BOMB, timeout=5)
        assert bomb.status in {"failed", "timed_out", "succeeded"}
        hog = services.run_python(
            as_alice,
            sandbox.id,
            "x = bytearray(1024 * 1024 * 1024); print('allocated')",
            timeout=30,
        )
        assert hog.exit_code != 0 and "allocated" not in hog.stdout
        # Killed by the OOM killer, so it did run: a hog that could not even start (the
        # bomb still holding every pid) would pass the line above.
        assert hog.exit_code == 137, (hog.exit_code, hog.stderr)
        assert services.run_command(as_alice, neighbour.id, "echo alive").stdout == "alive\n"
        after = services.run_command(as_alice, sandbox.id, "echo still here", timeout=20)
        assert after.stdout == "still here\n", (after.exit_code, after.stderr)
    finally:
        services.delete_sandbox(as_alice, neighbour.id)


def test_a_fork_bomb_in_a_starved_sandbox_is_gone_when_the_call_returns(
    real_docker, command_path, as_alice
):
    # With a tenth of a CPU, the bomb and the sweep that must end it share very little CPU:
    # what a loaded CI host was to the test above, every time. The sweep killed the bomb in
    # rounds, the bomb refilled every freed pid, the sweep gave up after 3 s and the exec came
    # back "succeeded" (the engine ends the stream 2 s after the wrapper exits), with the bomb
    # alive and the next command unable to fork: empty output.
    starved = services.create_sandbox(as_alice, cpus=0.1, memory_mb=256)
    try:
        bomb = services.run_command(as_alice, starved.id, BOMB, timeout=5)
        assert bomb.status in {"failed", "timed_out", "succeeded"}
        after = services.run_command(
            as_alice, starved.id, "echo still here; ps -e --no-headers | wc -l", timeout=20
        )
        assert after.stdout.startswith("still here\n"), (after.exit_code, after.stderr)
        assert int(after.stdout.split()[-1]) < 10  # the bomb is gone, not merely quiet
    finally:
        services.delete_sandbox(as_alice, starved.id)


# Started detached (own session, no environment, output elsewhere: none of a later command's
# business), it takes every free pid and keeps taking those that come free.
_FILLER = """
import os, time
while True:
    try:
        if os.fork() == 0:
            os.execv("/bin/sleep", ["sleep", "600"])
    except OSError:
        open("/tmp/full", "w").close()
        time.sleep(0.002)
"""
_START_FILLER = f"""
import os, subprocess, sys, time
subprocess.Popen([sys.executable, "-c", {_FILLER!r}], env={{}}, start_new_session=True,
                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
while not os.path.exists("/tmp/full"):
    time.sleep(0.01)
print("full")
"""


def test_a_command_that_cannot_start_is_an_error_not_an_empty_success(
    command_path, sandbox, as_alice
):
    # The wrapper forks to run the command; with no pid left it could not, and the call came
    # back as an ordinary failed command with empty output and a shell's "Cannot fork".
    assert services.run_python(as_alice, sandbox.id, _START_FILLER, timeout=60).stdout == "full\n"
    refusal = "no new process could be created|could not start"
    with pytest.raises(BackendFailure, match=refusal):
        services.run_command(as_alice, sandbox.id, "echo still here", timeout=20)
    row = CommandExecution.objects.filter(command="echo still here").get()
    assert row.status == "error" and re.search(refusal, row.error_message)


def test_the_wrappers_notice_is_found_however_the_stream_is_cut():
    # The engine frames output as it pleases: the wrapper's line may come a byte at a time,
    # after other output; a line with another exec's marker is not ours.
    marker = "0123456789abcdef0123456789abcdef"
    line = f"\n{NOTICE_PREFIX} {marker} {NOTICE_START}: the command could not start: no pid\n"
    stream = b"noise" * 3000 + f"\n{NOTICE_PREFIX} {'f' * 32} start: not ours\n".encode()
    stream += line.encode() + b"more noise"
    for size in (1, 7, 4096, len(stream)):
        notice = Notice(marker)
        for at in range(0, len(stream), size):
            notice.feed(stream[at : at + size])
        assert (notice.kind, notice.reason) == ("start", "the command could not start: no pid")


def test_undecodable_output_comes_back_faithfully(sandbox, as_alice):
    result = services.run_command(as_alice, sandbox.id, r"printf 'a\377b\000c'")
    assert result.stdout == "a\\xffb\\x00c"


def test_tenancy_and_quota_on_the_real_engine(sandbox, as_bob, as_alice, team_a, engine):
    with pytest.raises(NotFound):
        services.run_command(as_bob, sandbox.id, "echo x")
    with pytest.raises(NotFound):
        services.download_files(as_bob, sandbox.id, ["/etc/passwd"])
    team_a.max_running_sandboxes = 1
    team_a.save()
    ours = {"label": f"org.sandhub.team={team_a.slug}"}  # only this team's, not the engine's
    containers_before = len(engine.containers.list(all=True, filters=ours))
    with pytest.raises(QuotaExceeded, match="at most 1 running sandboxes"):
        services.create_sandbox(as_alice)
    assert len(engine.containers.list(all=True, filters=ours)) == containers_before


def test_unknown_engine_image_leaves_nothing(real_docker, as_alice, image, engine):
    image.reference = "sandhub/does-not-exist:never"
    image.save()
    with pytest.raises(BackendFailure):
        services.create_sandbox(as_alice)
    row = Sandbox.objects.get()
    assert row.status == "deleted" and containers_of(engine, row.public_id) == []
    assert not volume_exists(engine, row.public_id)
    assert services.list_sandboxes(as_alice) == []


def test_missing_file_and_bad_paths(sandbox, as_alice):
    with pytest.raises(NotFound):
        services.read_file(as_alice, sandbox.id, "nope.txt")
    with pytest.raises(NotFound):
        services.download_files(as_alice, sandbox.id, ["nope.txt"])
    with pytest.raises(InvalidInput):
        services.list_files(as_alice, sandbox.id, "bad\x00path")


def test_audit_and_history_rows_on_the_real_engine(sandbox, as_alice):
    before = AuditLog.objects.count()
    services.run_command(as_alice, sandbox.id, "exit 7")
    services.run_command(as_alice, sandbox.id, "sleep 5", timeout=1)
    assert AuditLog.objects.count() == before + 2
    rows = list(CommandExecution.objects.order_by("id").values_list("status", "exit_code"))
    assert [status for status, _ in rows] == ["failed", "timed_out"] and rows[0][1] == 7


def test_reading_a_directory_or_streaming_one_is_refused(sandbox, as_alice):
    services.write_file(as_alice, sandbox.id, "d/f.txt", "x")
    with pytest.raises(InvalidInput, match="not a regular file"):
        services.read_file(as_alice, sandbox.id, "d")
    with pytest.raises(InvalidInput, match="is a directory"):
        services.open_file_stream(as_alice, sandbox.id, "d")
