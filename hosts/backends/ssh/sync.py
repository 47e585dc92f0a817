"""Sync of a tree in an SSH sandbox: manifest, deletions, a tar of chosen entries.

As on Docker (docker/sync.py): the manifest and deletions are one agent request each, or,
on a host without python3 for the agent, one plain exec of the shared scripts
(syncscripts.py); a download of entries is `tar --null -T -` on a channel of its own, as
the sandbox user, the names sent on its stdin. Roots are sandbox paths (/workspace/...),
mapped to the host's directory here; entries are relative, so nothing maps back.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

from hosts.backends import syncscripts
from hosts.backends.agent import synccalls
from hosts.backends.agent.client import AgentUnavailable
from hosts.backends.agent.link import AgentLink
from hosts.backends.base import ManifestPage
from hosts.backends.ssh import layout
from hosts.backends.ssh.plain import PlainCommands, _feed
from hosts.backends.ssh.tarstreams import SshTars, TarStream


class SshTreeSync:
    def __init__(self, link: AgentLink, plain: PlainCommands, tars: SshTars) -> None:
        self.link, self.plain, self.tars = link, plain, tars

    def manifest(
        self, state: dict[str, Any], root: str, *, after: str | None, limit: int
    ) -> ManifestPage:
        host_root = layout.host_path(state, root)
        try:
            return self.link.idempotent(
                state, lambda c: synccalls.manifest(c, host_root, after=after, limit=limit)
            )
        except AgentUnavailable:
            pass
        run = self._run(state)
        return syncscripts.manifest_by_exec(run, host_root, after=after, limit=limit)

    def delete_entries(self, state: dict[str, Any], root: str, paths: list[str]) -> int:
        if not paths:
            return 0
        host_root = layout.host_path(state, root)
        names = syncscripts.names_blob(paths)
        try:
            # Tried again on a new agent if the channel broke: removing twice is harmless.
            return self.link.idempotent(state, lambda c: synccalls.remove(c, host_root, names))
        except AgentUnavailable:
            pass
        return syncscripts.delete_by_exec(self._run(state), host_root, paths)

    def _run(self, state: dict[str, Any]) -> syncscripts.Run:
        return syncscripts.runner(functools.partial(self.plain.exec, state), layout.WORKSPACE)

    def get_entries(self, state: dict[str, Any], root: str, paths: list[str]) -> Iterator[bytes]:
        host_root = layout.host_path(state, root)
        names = syncscripts.names_blob(paths)
        argv = ["sh", "-c", syncscripts.TAR_LIST, "sandhub-tar", host_root, str(len(names))]
        connection, channel = self.tars._open(layout.as_sandbox(state, argv))
        # From a thread when large: tar takes the names as it goes (plain._feed).
        _feed(channel, names)
        tar = TarStream(channel, root, connection)
        try:
            tar.begin()
        except FileNotFoundError:
            self.link.check_gone(state)
            raise
        return tar
