"""SSH connections cut under a caller working in a loop (the sshd processes serving them are
SIGKILLed, as the scale-out test's fault does): only the call meeting the cut may fail; the
caller's next call of any kind (a command, a write, a read) works on a new connection.

Before the fix a call starting in the few milliseconds after a cut, before paramiko's thread
marked the connection dead, met the dead connection (or an agent on it) and failed too: two
failed calls in a row, as the scale-out test saw in 1 run of 15 and this test at every cut."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from hosts.backends.ssh.backend import SshBackend
from hosts.backends.ssh.pool import ConnectionPool
from tests.cluster.faults import kill_serving
from tests.ssh.helpers import make_backend, make_tar, untar
from tests.ssh.sshd import Sshd

pytestmark = pytest.mark.sshd

CUTS = 12


@pytest.fixture
def backend(sshd: Sshd, base_dir: str) -> Iterator[SshBackend]:
    ssh = make_backend(sshd, base_dir, agent=True, name="cut-box")
    yield ssh
    ssh.close()


def one_of_each(backend: SshBackend, state: dict[str, Any], turn: int) -> None:
    kind = turn % 3
    if kind == 0:
        result = backend.exec(
            state, ["echo", f"t{turn}"], cwd="/workspace", env={}, timeout=30, output_cap=4096
        )
        assert result.stdout == f"t{turn}\n".encode(), result
    elif kind == 1:
        backend.put_files(state, "/workspace", make_tar({"cut.txt": f"{turn}\n".encode()}))
    else:
        stream = backend.get_files(state, "/workspace/cut.txt")
        try:
            assert untar(stream)["cut.txt"].strip().isdigit()
        finally:
            close = getattr(stream, "close", None)
            if close is not None:
                close()


# "sessions": the sshd processes serving each connection, as a network cut (the connections
# end at once); "monitors": only each session's privileged monitor, leaving connections half
# alive (open, but the next command on them ends them): both met at random moments.
@pytest.mark.parametrize("whole", [True, False], ids=["sessions", "monitors"])
def test_only_the_call_meeting_a_cut_fails(
    sshd: Sshd,
    backend: SshBackend,
    conns: ConnectionPool,
    make_sandbox: Callable[..., dict[str, Any]],
    whole: bool,
) -> None:
    state = make_sandbox()
    one_of_each(backend, state, 1)  # cut.txt exists for the reads
    outcomes: list[tuple[float, float, str]] = []  # (start, end, error or "")
    stop = threading.Event()

    def caller() -> None:
        turn = 0
        while not stop.is_set():
            started = time.monotonic()
            try:
                one_of_each(backend, state, turn)
                error = ""
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"
            outcomes.append((started, time.monotonic(), error))
            turn += 1

    worker = threading.Thread(target=caller)
    worker.start()
    cuts = []
    try:
        randomness = random.Random(28)
        for _ in range(CUTS):
            time.sleep(0.3 + randomness.random() * 0.5)
            cuts.append(time.monotonic())
            assert sshd.process is not None
            kill_serving(sshd.process.pid, whole=whole)
        time.sleep(1.0)
    finally:
        stop.set()
        worker.join(60)
        conns.drop(sshd.target())  # the fixtures' own connection was cut too
    assert not worker.is_alive()
    # Each failed call is put down to the last cut before its end: one per cut at most.
    by_cut: dict[int, list[str]] = {}
    for started, ended, error in outcomes:
        if error:
            cut = max((i for i, at in enumerate(cuts) if at <= ended), default=-1)
            by_cut.setdefault(cut, []).append(f"+{started - cuts[0]:.3f}s {error}")
    beyond = {cut: errors for cut, errors in by_cut.items() if cut < 0 or len(errors) > 1}
    assert not beyond, f"more than the call meeting a cut failed: {beyond}"
    assert len(outcomes) > 3 * CUTS
