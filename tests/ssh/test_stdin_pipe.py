"""Input written while a command runs (StdinPipe) on a real sshd: through the agent it
reaches the command as written and closing it ends the input; without the agent the
backend refuses it, saying why."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from hosts.backends.base import StdinPipe, Unsupported
from hosts.backends.ssh.backend import SshBackend
from tests.ssh.helpers import make_backend
from tests.ssh.sshd import Sshd

pytestmark = pytest.mark.sshd


@pytest.fixture(params=[True, False], ids=["agent", "plain"])
def backend(request, sshd: Sshd, base_dir: str) -> Iterator[SshBackend]:
    ssh = make_backend(sshd, base_dir, agent=request.param, name="stdin-box")
    ssh.with_agent = request.param
    yield ssh
    ssh.close()


def test_input_as_it_comes(backend: SshBackend, make_sandbox: Callable[..., dict[str, Any]]):
    state = make_sandbox()
    pipe = StdinPipe()
    results: list[Any] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            results.append(
                backend.exec(
                    state,
                    ["sh", "-c", "while read -r line; do echo got:$line; done"],
                    cwd="/workspace",
                    env={},
                    timeout=60,
                    output_cap=4096,
                    stdin=pipe,
                )
            )
        except BaseException as exc:
            errors.append(exc)

    worker = threading.Thread(target=run)
    worker.start()
    if not backend.with_agent:
        worker.join(30)
        assert isinstance(errors[0], Unsupported) and "sandbox agent" in str(errors[0])
        return
    pipe.write(b"one\n")
    pipe.write(b"two\n")
    pipe.close()
    worker.join(30)
    assert not worker.is_alive() and not errors
    assert results[0].exit_code == 0 and results[0].stdout == b"got:one\ngot:two\n"
