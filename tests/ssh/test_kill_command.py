"""kill_command on a real sshd, through the agent and without it: a command started with a
marker is killed by that marker from another thread, and its exec returns as killed."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from hosts.backends.ssh.backend import SshBackend
from tests.ssh.helpers import make_backend, remote_processes, wait_for
from tests.ssh.sshd import Sshd

pytestmark = pytest.mark.sshd


@pytest.fixture(params=[True, False], ids=["agent", "plain"])
def backend(request, sshd: Sshd, base_dir: str) -> Iterator[SshBackend]:
    ssh = make_backend(sshd, base_dir, agent=request.param, name="kill-box")
    yield ssh
    ssh.close()


def test_a_marked_command_is_killed_from_another_thread(
    sshd: Sshd, backend: SshBackend, make_sandbox: Callable[..., dict[str, Any]]
) -> None:
    state = make_sandbox()
    marker = uuid.uuid4().hex
    token = str(700000 + int(marker[:4], 16))
    results: list[Any] = []

    def run() -> None:
        results.append(
            backend.exec(
                state,
                ["sh", "-c", f"sleep {token}; echo no"],
                cwd="/workspace",
                env={},
                timeout=120,
                output_cap=4096,
                marker=marker,
            )
        )

    worker = threading.Thread(target=run)
    worker.start()
    wait_for(lambda: bool(remote_processes(sshd, token)), what="the command")
    began = time.monotonic()
    backend.kill_command(state, marker)
    worker.join(30)
    assert not worker.is_alive() and time.monotonic() - began < 15
    (result,) = results
    assert result.exit_code != 0 and b"no" not in result.stdout
    assert not remote_processes(sshd, token)
    backend.kill_command(state, marker)  # ended: nothing to do, no error
