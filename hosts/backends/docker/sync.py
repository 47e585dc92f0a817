"""Sync of a tree in a Docker sandbox: manifest, deletions, a tar of chosen entries.

The manifest and deletions are one agent request each; where the agent is off or the image
has no python3, one per-command exec of the shared scripts (syncscripts.py). A download of
entries is a `tar --null -T -` on an exec stream of its own (as files.py streams get_files),
the names sent on its stdin: never on a command line, never through a shell's parsing.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Iterator
from typing import Any

from hosts.backends import syncscripts
from hosts.backends.agent import synccalls
from hosts.backends.agent.client import AgentUnavailable
from hosts.backends.agent.link import AgentLink
from hosts.backends.base import ManifestPage
from hosts.backends.docker.exec import INTERNAL_TIMEOUT, Commands
from hosts.backends.docker.files import Files, TarStream
from hosts.backends.docker.names import container_ref


class TreeSync:
    def __init__(
        self, commands: Commands, files: Files, agents: AgentLink, agent_on: Callable[[], bool]
    ) -> None:
        self.commands, self.files, self.agents, self.agent_on = commands, files, agents, agent_on

    def manifest(
        self, state: dict[str, Any], root: str, *, after: str | None, limit: int
    ) -> ManifestPage:
        if self.agent_on():
            try:
                return self.agents.idempotent(
                    state, lambda c: synccalls.manifest(c, root, after=after, limit=limit)
                )
            except AgentUnavailable:
                pass
        return syncscripts.manifest_by_exec(self._run(state), root, after=after, limit=limit)

    def delete_entries(self, state: dict[str, Any], root: str, paths: list[str]) -> int:
        if not paths:
            return 0
        if self.agent_on():
            names = syncscripts.names_blob(paths)
            try:
                # Tried again on a new agent if the stream broke: removing twice is harmless.
                return self.agents.idempotent(state, lambda c: synccalls.remove(c, root, names))
            except AgentUnavailable:
                pass
        return syncscripts.delete_by_exec(self._run(state), root, paths)

    def _run(self, state: dict[str, Any]) -> syncscripts.Run:
        return syncscripts.runner(functools.partial(self.commands.exec, state), "/")

    def get_entries(self, state: dict[str, Any], root: str, paths: list[str]) -> Iterator[bytes]:
        names = syncscripts.names_blob(paths)
        command = ["sh", "-c", syncscripts.TAR_LIST, "sandhub-tar", root, str(len(names))]
        exec_id, stream = self.files._start(container_ref(state), command, stdin=True)
        # Sent from a thread of its own while the archive is read: tar takes the names as
        # it goes, so with both sides waiting on full buffers a send in line could hang.
        channel = getattr(stream.sock, "_sock", stream.sock)
        threading.Thread(target=_send, args=(channel, names), daemon=True).start()
        tar = TarStream(self.files, exec_id, stream, root)
        try:
            tar.begin()
        except BaseException:
            tar.close()
            raise
        return tar


def _send(channel: Any, data: bytes) -> None:
    """All of data, or nothing more once the stream is closed or stalls (tar then says
    what it missed at the stream's end)."""
    with contextlib.suppress(OSError):
        channel.settimeout(INTERNAL_TIMEOUT)
        channel.sendall(data)
