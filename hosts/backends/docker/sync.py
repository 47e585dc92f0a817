"""A tar of chosen entries of a Docker sandbox's tree (the local client's sync downloads).

`tar --null -T -` on an exec stream of its own (as files.py streams get_files), the names
sent on its stdin: never on a command line, never through a shell's parsing. The manifest
and deletions are agentfirst.py's, for every kind.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

from hosts.backends import syncscripts
from hosts.backends.docker.files import Files, TarStream
from hosts.backends.docker.names import container_ref
from hosts.backends.fallback.commands import INTERNAL_TIMEOUT


def get_entries(
    files: Files, state: dict[str, Any], root: str, paths: list[str]
) -> Iterator[bytes]:
    names = syncscripts.names_blob(paths)
    command = ["sh", "-c", syncscripts.TAR_LIST, "sandhub-tar", root, str(len(names))]
    exec_id, stream = files._start(container_ref(state), command, stdin=True)
    # Sent from a thread of its own while the archive is read: tar takes the names as it
    # goes, so with both sides waiting on full buffers a send in line could hang.
    threading.Thread(target=_send, args=(stream.timed, names), daemon=True).start()
    tar = TarStream(files, exec_id, stream, root)
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
