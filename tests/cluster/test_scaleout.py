"""The multi-node layout on one machine under load and faults (issue 28): PostgreSQL, two web
processes, two qcluster workers, two Docker engines, an SSH host; 20 MCP clients over both
web processes; kill -9 of a web process and of a worker, a restart of the second dockerd and
the SSH connections cut while they work. Then each check below, on that one run.

Needs PostgreSQL (DATABASE_URL; SQLite's single writer is no multi-node layout), root (sshd,
Unix users), the Docker engine. Marked `scaleout`: a few minutes. SCALEOUT_SECONDS sets the
load's length (default 40).
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings
from django.test import override_settings

from hosts.backends import reset_backends
from tests.cluster import checks
from tests.cluster.dockerd2 import SecondEngine, unavailable_reason
from tests.cluster.engines import remote_engine
from tests.cluster.layout import Layout, running_layout
from tests.cluster.scenario import (
    LoadConfig,
    RunResult,
    delete_sandboxes,
    placed_on,
    run_load,
)
from tests.leftovers import remove_sandboxes_under

ON_POSTGRES = settings.DATABASES["default"]["ENGINE"].endswith("postgresql")

pytestmark = [
    pytest.mark.scaleout,
    pytest.mark.docker,
    pytest.mark.qcluster,
    pytest.mark.skipif(
        not ON_POSTGRES,
        reason="the multi-node layout needs PostgreSQL: set DATABASE_URL (SQLite has one "
        "writer and no shared broker for several processes)",
    ),
]

SECONDS = float(os.environ.get("SCALEOUT_SECONDS", "40"))
# The lease of a web process expires ~10-15 s after it dies; then its rows are closed.
KILLED_ROWS_SECONDS = 20.0


@pytest.fixture(scope="module")
def instance() -> Iterator[str]:
    """An instance label of the run's own, for this process and the platform's: the
    reconciliation then removes only what this run made (other tests share the engine)."""
    name = f"scaleout-{secrets.token_hex(4)}"
    saved = os.environ.get("SANDHUB_INSTANCE")
    os.environ["SANDHUB_INSTANCE"] = name
    try:
        with override_settings(SANDHUB_INSTANCE=name):
            yield name
    finally:
        if saved is None:
            os.environ.pop("SANDHUB_INSTANCE", None)
        else:
            os.environ["SANDHUB_INSTANCE"] = saved


@pytest.fixture(scope="module")
def scaleout_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecondEngine]:
    """The second dockerd (tests/cluster/conftest.py `second_engine`), under a name of its own:
    its data root is then not shared with the engine tests when both run at once."""
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    engine = SecondEngine.start(tmp_path_factory.mktemp("dockerd2"), name="dockerd-scaleout")
    yield engine
    engine.stop()


@pytest.fixture(scope="module")
def layout(
    live_db, instance, server, scaleout_engine: SecondEngine, tmp_path_factory
) -> Iterator[Layout]:
    scratch = tmp_path_factory.mktemp("scaleout")
    # Open to the sandboxes' own users (tests/conftest.py `workdir` does the same).
    ssh_dir = Path(tempfile.mkdtemp(prefix="sandhub-scaleout-", dir="/var/tmp"))
    ssh_dir.chmod(0o777)
    reset_backends()
    try:
        with running_layout(
            scratch, remote_engine(scaleout_engine), server, ssh_dir / "base"
        ) as running:
            yield running
    finally:
        reset_backends()
        remove_sandboxes_under(ssh_dir)
        shutil.rmtree(ssh_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def run(layout: Layout) -> RunResult:
    result = run_load(layout, LoadConfig(seconds=SECONDS))
    print("\nscaleout figures:", checks.figures(result))
    return result


def test_every_accepted_command_has_a_final_state(run: RunResult) -> None:
    """With no lease per web process, the killed web's commands stay `running` until the
    sweep's timeout-plus-grace (minutes): this fails until they close within seconds."""
    checks.check_history_final(run, seconds_after_load=30.0)


def test_the_killed_web_process_commands_close_within_seconds(run: RunResult) -> None:
    """Fails on main (no lease): its rows stay `running` for timeout plus 5 minutes."""
    checks.check_killed_web_rows_closed(run, seconds=KILLED_ROWS_SECONDS)


def test_clients_carry_on_after_at_most_one_failed_call_per_fault(run: RunResult) -> None:
    checks.check_clients_recovered(run)


def test_every_background_job_ended_with_output_or_error(run: RunResult) -> None:
    checks.check_jobs_ended(run)


def test_sandboxes_were_placed_on_both_engines_and_the_ssh_host(
    run: RunResult, layout: Layout
) -> None:
    checks.check_placement(run, placed_on(run), layout)


def test_nothing_left_behind_after_delete_and_reconcile(run: RunResult, layout: Layout) -> None:
    problems = delete_sandboxes(layout, run.sandboxes)
    assert not problems, problems
    checks.check_no_leftovers(layout, set(run.sandboxes))
