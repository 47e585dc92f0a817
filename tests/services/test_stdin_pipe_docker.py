"""run_command with input written while it runs (stdin_pipe), on a real Docker sandbox: the
command reads it as written, the history row records its output; a pipe with stdin text or
a shell session is refused."""

from __future__ import annotations

import threading

import pytest

from sandboxes import services
from sandboxes.contract.errors import InvalidInput
from sandboxes.models import CommandExecution

pytestmark = pytest.mark.docker


def test_input_written_while_the_command_runs(world, shared_sandbox):
    alice = world.principal()
    pipe = services.StdinPipe()
    results: list = []
    worker = threading.Thread(
        target=lambda: results.append(
            services.run_command(alice, shared_sandbox, "tr a-z A-Z", stdin_pipe=pipe)
        )
    )
    worker.start()
    pipe.write(b"hello ")
    pipe.write(b"pipe\n")
    pipe.close()
    worker.join(60)
    (result,) = results
    assert (result.exit_code, result.stdout) == (0, "HELLO PIPE\n")
    assert CommandExecution.objects.get(pk=result.id).stdout == "HELLO PIPE\n"
    with pytest.raises(services.StdinClosed):
        pipe.write(b"late")


def test_a_pipe_goes_alone(world, shared_sandbox):
    alice = world.principal()
    for extra in ({"stdin": "text"}, {"session": "main"}):
        with pytest.raises(InvalidInput, match="input as it comes"):
            services.run_command(
                alice, shared_sandbox, "cat", stdin_pipe=services.StdinPipe(), **extra
            )
