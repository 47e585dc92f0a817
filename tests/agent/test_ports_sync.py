"""The sandbox agent's port streams and tree sync without Docker: the agent run by this
machine's python3 over pipes (the `agent` fixture: tests/agent/conftest.py), against servers
and folders of this machine (the Docker and SSH sides: tests/docker/test_port_streams.py,
tests/ssh/test_ports.py, tests/services/test_sync.py, tests/ssh/test_sync.py).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hosts.backends.agent import protocol
from hosts.backends.agent.client import AgentClient
from hosts.backends.base import BackendError, ExecResult, PortClosed

# --- port streams (the Docker and SSH sides: docker/test_port_streams.py, ssh/test_ports.py)
_LISTEN = (
    "import socket\ns = socket.create_server(('127.0.0.1', 0))\n"
    "print(s.getsockname()[1], flush=True)\nc = s.accept()[0]\n"
)
_PUSHER = _LISTEN + "while True:\n    c.sendall(b'z' * 65536)\n"
_ECHO = _LISTEN + "while d := c.recv(65536):\n    c.sendall(d)\n"


@contextlib.contextmanager
def local_server(code: str, **options: Any) -> Iterator[int]:
    """A python3 server on 127.0.0.1 (its port printed first) run by this machine."""
    python = "/usr/bin/python3"  # not the virtualenv's: another user may not reach it
    server = subprocess.Popen([python, "-c", code], stdout=subprocess.PIPE, **options)
    try:
        assert server.stdout is not None
        yield int(server.stdout.readline())
    finally:
        server.kill()
        server.wait()


def test_a_port_stream_round_trips_and_keeps_its_window(agent: AgentClient) -> None:
    with local_server(_ECHO) as port:
        stream = agent.open_port(port)
        data = os.urandom(3 * protocol.WINDOW)
        writer = threading.Thread(target=lambda: (stream.write(data), stream.close_write()))
        writer.start()
        got = bytearray()
        while chunk := stream.read(timeout=20):
            got += chunk
        writer.join()
        assert got == data and stream.read() == b""
        assert agent.ping()["inflight"] == 0 and agent.inflight == 0
    with local_server(_PUSHER) as port, agent.open_port(port) as stream:
        for _ in range(200):  # slower than the app writes: what waits is at most the window
            assert len(stream.read(8192, timeout=20)) > 0
            assert stream._buffered <= protocol.WINDOW  # type: ignore[attr-defined]
        with pytest.raises(TimeoutError), agent.open_port(port) as waiting:
            waiting.read(timeout=0.2)  # accepted by nobody: no byte comes


def test_port_refusals_and_close(agent: AgentClient) -> None:
    with local_server(_PUSHER) as port:
        stream = agent.open_port(port)
        assert stream.read(timeout=20)
        stream.close()
        stream.close()  # idempotent
        give_up = time.monotonic() + 20
        while agent.ping()["inflight"] or agent.inflight:  # the agent closed the connection
            assert time.monotonic() < give_up
            time.sleep(0.02)
    with pytest.raises(PortClosed, match=f"nothing listens on port {port} in the sandbox"):
        agent.open_port(port)
    with pytest.raises(BackendError, match="from 1 to 65535"):
        agent.open_port(0)
    # A listener of another user (as another sandbox's, on an SSH host's shared loopback).
    with local_server(_PUSHER, user=65534) as port, pytest.raises(PortClosed) as refused:
        agent.open_port(port)
    assert f"port {port} is not this sandbox's" in str(refused.value)
    assert agent.ping()["inflight"] == 0


# --- sync: manifest and remove, and the per-command scripts that stand in for them ----------
def _local_run(argv: list[str], stdin: bytes | None, cap: int) -> ExecResult:
    done = subprocess.run(argv, input=stdin or b"", capture_output=True, timeout=60)
    return ExecResult(
        exit_code=done.returncode,
        stdout=done.stdout[:cap],
        stderr=done.stderr,
        stdout_bytes=len(done.stdout),
        stderr_bytes=len(done.stderr),
        stdout_truncated=len(done.stdout) > cap,
        stderr_truncated=False,
        timed_out=False,
        duration_seconds=0.0,
    )


def _sync_tree(root: Path) -> list[str]:
    for name in ("a/c/d.txt", "a/b", "a-x", "a.txt", "z/1", "\u00e9t\u00e9"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(name)
    os.utime(root / "a.txt", ns=(1, 1_700_000_000_123_456_789))
    (root / "a.txt").chmod(0o640)
    os.symlink("a/b", root / "link")
    os.mkfifo(root / "fifo")  # not listed: no place in a sync
    (root / os.fsdecode(b"bad-\xff")).write_text("not UTF-8: left out")
    return ["a", "a-x", "a.txt", "a/b", "a/c", "a/c/d.txt", "link", "z", "z/1", "\u00e9t\u00e9"]


def test_manifest_pages_in_byte_order_as_the_find_script_does(
    agent: AgentClient, tmp_path: Path
) -> None:
    from hosts.backends import syncscripts
    from hosts.backends.agent import synccalls

    expected = _sync_tree(tmp_path)
    whole = synccalls.manifest(agent, str(tmp_path), top=str(tmp_path), after=None, limit=5000)
    assert [e.path for e in whole.entries] == expected and whole.next is None
    by_find = syncscripts.manifest_by_exec(
        _local_run, str(tmp_path), str(tmp_path), after=None, limit=5000
    )
    assert by_find == whole  # the plain path answers exactly the same
    entry = {e.path: e for e in whole.entries}
    assert entry["a.txt"].mode == 0o640 and entry["a.txt"].mtime == 1700000000.1234567
    assert (entry["link"].kind, entry["link"].target) == ("link", "a/b")
    assert (entry["a"].kind, entry["a"].size) == ("dir", 0)

    for limit in (1, 3, 4):
        pages, after = [], None
        while True:
            page = synccalls.manifest(
                agent, str(tmp_path), top=str(tmp_path), after=after, limit=limit
            )
            plain = syncscripts.manifest_by_exec(
                _local_run, str(tmp_path), str(tmp_path), after=after, limit=limit
            )
            assert page == plain and len(page.entries) <= limit
            pages += [e.path for e in page.entries]
            if page.next is None:
                break
            after = page.next
        assert pages == expected
    top = str(tmp_path)
    missing = synccalls.manifest(agent, str(tmp_path / "none"), top=top, after=None, limit=10)
    assert (missing.exists, missing.entries) == (False, [])
    with pytest.raises(NotADirectoryError):
        synccalls.manifest(agent, str(tmp_path / "a.txt"), top=top, after=None, limit=10)
    with pytest.raises(NotADirectoryError):
        syncscripts.manifest_by_exec(_local_run, str(tmp_path / "link"), top, after=None, limit=10)


@pytest.mark.parametrize("way", ["agent", "script"])
def test_remove_stays_under_the_root(agent: AgentClient, tmp_path: Path, way: str) -> None:
    from hosts.backends import syncscripts
    from hosts.backends.agent import synccalls

    root, outside = tmp_path / "root", tmp_path / "outside"
    _sync_tree(root)
    outside.mkdir()
    (outside / "keep").write_text("keep")
    os.symlink(outside, root / "escape")
    os.symlink(outside / "keep", root / "keep-link")
    names = ["a", "a.txt", "keep-link", "escape/keep", "../outside/keep", "z/../a-x", ""]
    names += ["/abs", "nothing", "a/c/d.txt"]
    if way == "agent":
        removed = synccalls.remove(agent, str(root), syncscripts.names_blob(names), top=str(root))
    else:
        removed = syncscripts.delete_by_exec(_local_run, str(root), str(root), names)
    left = sorted(os.listdir(root))
    assert "a" not in left and "a.txt" not in left and "keep-link" not in left
    assert {"a-x", "escape", "z"} <= set(left)
    assert (outside / "keep").read_text() == "keep"
    # a, a.txt, keep-link; a/c/d.txt went with a (the agent removes in order; the script's
    # check may run before or after rm took a)
    assert removed in (3, 4)


@pytest.mark.parametrize("way", ["agent", "script"])
def test_a_root_reached_through_a_link_is_refused(
    agent: AgentClient, tmp_path: Path, way: str
) -> None:
    """/workspace/out -> a directory outside (here: top/out -> outside), or a link further up
    the way: listing and deleting are refused by name, nothing outside is touched."""
    from hosts.backends import syncscripts
    from hosts.backends.agent import synccalls

    top, outside = tmp_path / "workspace", tmp_path / "outside"
    (top / "real").mkdir(parents=True)
    (outside / "sub").mkdir(parents=True)
    (outside / "victim.txt").write_text("keep")
    os.symlink(outside, top / "out")
    os.symlink(outside, top / "real" / "via")
    names = syncscripts.names_blob(["victim.txt", "sub"])
    for root in ("out", "out/sub", "real/via", "out/missing"):
        with pytest.raises(NotADirectoryError, match="is a symbolic link") as refused:
            if way == "agent":
                synccalls.remove(agent, str(top / root), names, top=str(top))
            else:
                syncscripts.delete_by_exec(
                    _local_run, str(top / root), str(top), ["victim.txt", "sub"]
                )
        assert str(refused.value).startswith("/workspace/"), refused.value
        with pytest.raises(NotADirectoryError, match="is a symbolic link"):
            if way == "agent":
                synccalls.manifest(agent, str(top / root), top=str(top), after=None, limit=9)
            else:
                syncscripts.manifest_by_exec(
                    _local_run, str(top / root), str(top), after=None, limit=9
                )
    assert sorted(os.listdir(outside)) == ["sub", "victim.txt"]
    assert (outside / "victim.txt").read_text() == "keep"
