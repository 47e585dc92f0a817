"""A tar of chosen entries of an SSH sandbox's tree (the local client's sync downloads).

`tar --null -T -` on a channel of its own, as the sandbox user, the names sent on its stdin
(never on a command line). Roots are sandbox paths (/workspace/...), mapped to the host's
directory here; entries are relative, so nothing maps back. The manifest and deletions are
agentfirst.py's, for every kind.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from hosts.backends import syncscripts
from hosts.backends.ssh import layout
from hosts.backends.ssh.plain import feed
from hosts.backends.ssh.tarstreams import SshTars, TarStream


def get_entries(
    tars: SshTars, state: dict[str, Any], root: str, paths: list[str]
) -> Iterator[bytes]:
    host_root = layout.host_path(state, root)
    names = syncscripts.names_blob(paths)
    argv = ["sh", "-c", syncscripts.TAR_LIST, "sandhub-tar", host_root, str(len(names))]
    connection, channel = tars._open(layout.as_sandbox(state, argv))
    feed(channel, names)  # from a thread when large: tar takes the names as it goes
    tar = TarStream(channel, root, connection)
    try:
        tar.begin()
    except FileNotFoundError:
        tars.link.check_gone(state)
        raise
    return tar
