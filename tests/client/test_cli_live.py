"""The `sandhub` command against a live platform: uvicorn serving the real ASGI app, a Docker
sandbox, the CLI run as a subprocess with SANDHUB_URL / SANDHUB_API_KEY, as on a laptop.

What the server received is read from its audit rows (files.sync.upload's "files"), not from
what the client says it sent.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sandhub.api import Platform
from sandhub.sync import push

from tenants.models import AuditLog
from tests.client.helpers import T0, make_tree, sandhub, snapshot, write

pytestmark = [
    pytest.mark.docker,
    pytest.mark.filterwarnings("ignore:The logging capability is deprecated"),
]


def uploads() -> list[AuditLog]:
    return list(AuditLog.objects.filter(action="files.sync.upload").order_by("id"))


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("laptop") / "proj"
    make_tree(root, 2000)  # 2,000 files in 40 directories, a link, mtimes to the ns
    return root


def test_sync_2000_files_then_only_the_3_changed_are_sent(cli_env, project, shared_sandbox):
    before = len(uploads())
    first = sandhub(cli_env, "sync", str(project), f"{shared_sandbox}:proj")
    assert first.returncode == 0, first.stderr
    rows = uploads()[before:]
    assert len(rows) == 1 and rows[0].details["files"] == 2000, [r.details for r in rows]

    # An unchanged tree: the manifest (one page) and nothing else (its speed is
    # bench/bench_sync.py's to measure, never a timed test's).
    with Platform(cli_env["SANDHUB_URL"], cli_env["SANDHUB_API_KEY"]) as platform:
        report = push(platform, project, shared_sandbox, "proj")
    assert (report.sent, report.unchanged) == ([], 2001)
    assert len(uploads()) == before + 1
    cli = sandhub(cli_env, "sync", str(project), f"{shared_sandbox}:proj")
    assert cli.returncode == 0 and "sent 0 entries" in cli.stderr, cli.stderr

    write(project, "pkg1/mod1.py", "changed = True\n")
    write(project, "pkg2/mod2.py", "changed = True\n")
    (project / "pkg3/mod3.py").chmod(0o700)
    again = sandhub(cli_env, "sync", str(project), f"{shared_sandbox}:proj")
    assert again.returncode == 0, again.stderr
    rows = uploads()[before + 1 :]
    assert len(rows) == 1 and rows[0].details["files"] == 3
    assert sorted(rows[0].details["paths"]) == ["pkg1/mod1.py", "pkg2/mod2.py", "pkg3/mod3.py"]
    assert "sent 3 entries" in again.stderr


def test_pull_back_is_byte_identical_with_modes_and_mtimes(
    cli_env, project, shared_sandbox, tmp_path
):
    assert sandhub(cli_env, "sync", str(project), f"{shared_sandbox}:proj").returncode == 0
    back = tmp_path / "back"
    result = sandhub(cli_env, "sync", f"{shared_sandbox}:proj", str(back))
    assert result.returncode == 0, result.stderr
    assert snapshot(back) == snapshot(project)
    assert os.readlink(back / "pkg0/link") == "mod0.py"


def test_dry_run_changes_nothing_and_delete_removes_extras_both_ways(
    cli_env, project, shared_sandbox, tmp_path
):
    remote = f"{shared_sandbox}:proj"
    assert sandhub(cli_env, "sync", str(project), remote).returncode == 0
    extra = sandhub(
        cli_env,
        "run",
        shared_sandbox,
        "--",
        "mkdir -p proj/junk && touch proj/junk/a proj/stale.txt",
    )
    assert extra.returncode == 0, extra.stderr
    write(project, "pkg4/mod4.py", "changed for the dry run\n")
    before = len(uploads())

    dry = sandhub(cli_env, "sync", "--delete", "--dry-run", str(project), remote)
    assert dry.returncode == 0, dry.stderr
    assert "would send: pkg4/mod4.py" in dry.stdout
    assert "would delete: junk" in dry.stdout and "would delete: stale.txt" in dry.stdout
    assert len(uploads()) == before
    still = sandhub(cli_env, "run", shared_sandbox, "--", "ls proj/junk proj/stale.txt")
    assert still.returncode == 0, still.stderr

    done = sandhub(cli_env, "sync", "--delete", str(project), remote)
    assert done.returncode == 0, done.stderr
    gone = sandhub(cli_env, "run", shared_sandbox, "--", "ls proj/junk proj/stale.txt")
    assert gone.returncode != 0

    local = tmp_path / "local"
    assert sandhub(cli_env, "sync", remote, str(local)).returncode == 0
    write(local, "only-here.txt")
    pulled = sandhub(cli_env, "sync", "--delete", remote, str(local))
    assert pulled.returncode == 0, pulled.stderr
    assert not (local / "only-here.txt").exists()
    assert snapshot(local) == snapshot(project)


def test_run_streams_output_live_and_passes_the_exit_code_through(cli_env, shared_sandbox):
    result = sandhub(
        cli_env, "run", shared_sandbox, "--", "bash", "-c", "echo out; echo err >&2; exit 7"
    )
    assert result.returncode == 7
    assert result.stdout == "out\n" and "err" in result.stderr
    assert sandhub(cli_env, "run", shared_sandbox, "--", "true").returncode == 0

    live = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sandhub.cli",
            "run",
            shared_sandbox,
            "--",
            "echo first; sleep 4; echo second",
        ],
        env=cli_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert live.stdout is not None
        first = live.stdout.readline()
        running_when_first_arrived = live.poll() is None
        rest, _ = live.communicate(timeout=60)
    finally:
        live.kill()
    assert first == "first\n" and running_when_first_arrived
    assert rest == "second\n" and live.returncode == 0


def test_cp_both_ways_keeps_content_and_mode(cli_env, shared_sandbox, tmp_path):
    tool = write(tmp_path, "tool.sh", "#!/bin/sh\necho hi\n", mode=0o755)
    os.utime(tool, ns=(T0, T0))
    up = sandhub(cli_env, "cp", str(tool), f"{shared_sandbox}:cpdir/")
    assert up.returncode == 0, up.stderr
    ran = sandhub(cli_env, "run", shared_sandbox, "--", "./cpdir/tool.sh")
    assert (ran.returncode, ran.stdout) == (0, "hi\n")

    down = tmp_path / "down"
    down.mkdir()
    got = sandhub(cli_env, "cp", f"{shared_sandbox}:cpdir/tool.sh", str(down))
    assert got.returncode == 0, got.stderr
    assert (down / "tool.sh").read_bytes() == tool.read_bytes()
    assert (down / "tool.sh").stat().st_mode & 0o777 == 0o755
    assert (down / "tool.sh").stat().st_mtime_ns == T0

    tree = tmp_path / "tree"
    write(tree, "a/b.txt", "b")
    write(tree, "c.txt", "c")
    assert sandhub(cli_env, "cp", str(tree), f"{shared_sandbox}:cpdir").returncode == 0
    copy = tmp_path / "copy"
    assert sandhub(cli_env, "cp", f"{shared_sandbox}:cpdir/tree", str(copy)).returncode == 0
    assert snapshot(copy) == snapshot(tree)


def test_a_missing_sandbox_is_a_clear_error(cli_env, project):
    for args in (
        ("sync", str(project), "sb_nope00000000:proj"),
        ("run", "sb_nope00000000", "--", "true"),
        ("cp", "sb_nope00000000:x", str(project)),
    ):
        result = sandhub(cli_env, *args)
        assert result.returncode == 1, (args, result.stderr)
        assert "sandbox sb_nope00000000 not found" in result.stderr, (args, result.stderr)
        assert "Traceback" not in result.stderr


def test_sandboxes_logs_jobs_and_login(cli_env, shared_sandbox, tmp_path):
    created = sandhub(cli_env, "sandboxes", "create", "--name", "cli-made", "--memory-mb", "256")
    assert created.returncode == 0, created.stderr
    new_id = created.stdout.strip()
    assert new_id.startswith("sb_")
    listing = sandhub(cli_env, "sandboxes")
    assert listing.returncode == 0 and new_id in listing.stdout and "cli-made" in listing.stdout
    removed = sandhub(cli_env, "sandboxes", "rm", "cli-made")  # by name
    assert removed.returncode == 0, removed.stderr
    assert new_id not in sandhub(cli_env, "sandboxes", "ls").stdout.replace(" deleted", "")

    assert sandhub(cli_env, "run", shared_sandbox, "--", "echo for-the-logs").returncode == 0
    logs = sandhub(cli_env, "logs", shared_sandbox, "-n", "5")
    assert logs.returncode == 0 and "echo for-the-logs" in logs.stdout
    command_id = next(
        line.split()[0] for line in logs.stdout.splitlines() if "echo for-the-logs" in line
    )
    one = sandhub(cli_env, "logs", shared_sandbox, command_id)
    assert (one.returncode, one.stdout) == (0, "for-the-logs\n")

    started = sandhub(cli_env, "jobs", shared_sandbox, "--start", "echo job-ran; sleep 300")
    assert started.returncode == 0, started.stderr
    job_id = started.stdout.strip()
    assert job_id in sandhub(cli_env, "jobs", shared_sandbox).stdout
    deadline = time.monotonic() + 30
    while "job-ran" not in (check := sandhub(cli_env, "jobs", shared_sandbox, job_id)).stdout:
        assert time.monotonic() < deadline, check.stderr
    cancelled = sandhub(cli_env, "jobs", shared_sandbox, job_id, "--cancel")
    assert cancelled.returncode == 0 and "cancelled" in cancelled.stderr

    # login stores the URL and key (0600) for runs without the environment
    env = {k: v for k, v in cli_env.items() if k not in ("SANDHUB_URL", "SANDHUB_API_KEY")}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "cfg")
    assert "SANDHUB_API_KEY not set" in sandhub(env, "sandboxes").stderr
    login = sandhub(
        env, "login", "--url", cli_env["SANDHUB_URL"] + "/mcp/", "--key", cli_env["SANDHUB_API_KEY"]
    )
    assert login.returncode == 0, login.stderr
    assert (tmp_path / "cfg/sandhub/config.json").stat().st_mode & 0o777 == 0o600
    assert shared_sandbox in sandhub(env, "sandboxes").stdout
    bad = sandhub(env, "login", "--url", cli_env["SANDHUB_URL"], "--key", "shk_wrong_key")
    assert bad.returncode == 1 and "sandhub:" in bad.stderr
    print(bad.stderr)
