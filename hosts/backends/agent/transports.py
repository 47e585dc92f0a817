"""A transport over a local child process's pipes: the agent run by this machine's python3.

For tests and tools (no sandbox around it); the Docker transport lives with the Docker
backend (hosts/backends/docker/agent_link.py), which is above this package.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading

from hosts.backends.agent import protocol


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
