"""A Docker client for tests that make containers under their own Sandhub instance label, and
the local engine behind a TCP proxy that can stop answering. Not a test module."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator

import docker

from hosts.backends.base import LABEL_INSTANCE
from hosts.backends.docker import DockerBackend
from hosts.models import Host


@contextlib.contextmanager
def engine_cleaning_up(instance: str) -> Iterator[docker.DockerClient]:
    """The local engine; on exit, removes whatever a failed test left under `instance` only."""
    client = docker.from_env()
    cleaner = DockerBackend(
        Host(name="local", kind="docker", endpoint="unix:///var/run/docker.sock")
    )
    try:
        yield client
    finally:
        for container in client.containers.list(
            all=True, filters={"label": f"{LABEL_INSTANCE}={instance}"}
        ):
            label = container.labels.get("org.sandhub.sandbox", "")
            container.remove(force=True, v=True)
            # destroy also removes the sandbox's volume, network and disk image.
            with contextlib.suppress(Exception):
                cleaner.destroy({"sandbox_id": label})
        cleaner.close()
        client.close()


class EngineProxy:
    """127.0.0.1:<port> forwarded to the engine's unix socket: a Docker host on TCP whose
    engine can stop answering (stop) and answer again (start), on the same port."""

    def __init__(self, socket_path: str = "/var/run/docker.sock") -> None:
        self.socket_path = socket_path
        self.port = 0
        self._sockets: list[socket.socket] = []
        self._listener: socket.socket | None = None

    def start(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(16)
        self.port = listener.getsockname()[1]
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def stop(self) -> None:
        for sock in [self._listener, *self._sockets]:
            with contextlib.suppress(OSError):
                if sock is not None:
                    sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                if sock is not None:
                    sock.close()
        self._sockets.clear()
        self._listener = None

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            upstream = socket.socket(socket.AF_UNIX)
            upstream.connect(self.socket_path)
            self._sockets += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)
