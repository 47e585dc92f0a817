"""What an agent client speaks through (Transport), and a transport over a local child
process's pipes: the agent run by this machine's python3.

PipeTransport is for tests and tools (no sandbox around it); the Docker transport lives with
the Docker backend (hosts/backends/docker/agent_link.py), the SSH one with the SSH backend,
both above this package.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import IO, Protocol

from hosts.backends.agent import protocol
from hosts.backends.stdin import StdinPipe


class Transport(Protocol):
    """A duplex byte stream to the agent: its stdin one way, its stdout the other."""

    def recv(self) -> bytes:
        """The next bytes the agent wrote on stdout, blocking; b"" at the end."""
        ...

    def sendall(self, data: bytes) -> None: ...

    def close(self) -> None:
        """Ends the stream (the agent sees the end of its input); unblocks recv()."""
        ...

    def said(self) -> str:
        """The last of what the agent wrote on stderr (a traceback, an exec error), or ""."""
        ...


def input_chunks(content: bytes | IO[bytes] | StdinPipe) -> Iterator[bytes]:
    """A command's input in pieces of at most one frame: bytes cut, a file or pipe read."""
    if isinstance(content, bytes | bytearray | memoryview):
        view = memoryview(content)
        for at in range(0, len(view), protocol.CHUNK):
            yield bytes(view[at : at + protocol.CHUNK])
        return
    while chunk := content.read(protocol.CHUNK):
        yield chunk


class PipeTransport:
    """`python3 -I -u -c BOOTSTRAP` as a child process, spoken to over its stdin and stdout."""

    def __init__(self, python: str = sys.executable, cwd: str = "/") -> None:
        self.process = subprocess.Popen(
            [python, "-I", "-u", "-c", protocol.BOOTSTRAP],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
        )
        assert self.process.stdin and self.process.stdout and self.process.stderr
        self._in, self._out = self.process.stdin.fileno(), self.process.stdout.fileno()
        self._stderr = bytearray()
        threading.Thread(target=self._keep_stderr, daemon=True).start()

    def _keep_stderr(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self._stderr += line
            del self._stderr[:-8192]

    def recv(self) -> bytes:
        try:
            chunk = os.read(self._out, 64 * 1024)
        except OSError:
            chunk = b""
        if not chunk:  # the agent is gone: collect it (it exits right after its output ends)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=30)
        return chunk

    def sendall(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self._in, view) :]

    def close(self) -> None:
        """Ends the agent's input: it stops its commands and exits, which ends recv()."""
        with contextlib.suppress(OSError):
            self.process.stdin.close()  # type: ignore[union-attr]

    def said(self) -> str:
        return self._stderr.decode("utf-8", "replace")
