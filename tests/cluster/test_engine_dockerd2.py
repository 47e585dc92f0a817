"""The second engine itself: TLS only with the client certificate, restart on the same port,
and nothing left behind once stopped."""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path

import docker
import pytest
import requests

from tests.cluster.dockerd2 import IMAGE, SecondEngine, leftover_mounts, unavailable_reason

pytestmark = pytest.mark.docker


def _interfaces() -> set[str]:
    return set(os.listdir("/sys/class/net"))


def test_it_answers_over_tls_only_and_stops_clean(tmp_path: Path) -> None:
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    interfaces_before = _interfaces()
    engine = SecondEngine.start(tmp_path, name="dockerd2-self")
    pid = engine.process.pid if engine.process else 0
    try:
        with contextlib.closing(engine.client()) as client:
            assert client.images.get(IMAGE).id == docker.from_env().images.get(IMAGE).id
            output = client.containers.run(IMAGE, ["echo", "hi"], remove=True, network_mode="none")
            assert output == b"hi\n"
        # Without a client certificate the engine refuses the TLS handshake.
        with pytest.raises(requests.exceptions.SSLError):
            requests.get(f"https://127.0.0.1:{engine.port}/_ping", verify=str(engine.tls.ca))
        # The main engine's bridge is untouched (dockerd --bridge=none deleted docker0).
        assert interfaces_before <= _interfaces()
        port = engine.port
        engine.restart()
        assert engine.port == port and engine.answers()
    finally:
        engine.stop()
    assert not engine.answers()
    assert subprocess.run(["kill", "-0", str(pid)], capture_output=True).returncode != 0
    assert leftover_mounts((str(engine.exec_root), str(engine.data_root) + "/")) == []
    assert _interfaces() == interfaces_before


def test_a_second_run_with_the_same_name_is_refused(tmp_path: Path) -> None:
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    first = SecondEngine.start(tmp_path / "a", name="dockerd2-self", load_image=False)
    try:
        with pytest.raises(RuntimeError, match="in use"):
            SecondEngine.start(tmp_path / "b", name="dockerd2-self", load_image=False)
    finally:
        first.stop()
