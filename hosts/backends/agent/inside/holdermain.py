"""The holder's start (the last part of the holder's program): its socket, then its loop."""

from __future__ import annotations

import os
import signal
import socket
import sys

from .holder import Holder, _libc
from .ptyholder import Terminal
from .shellholder import Shell


def main(config: dict) -> None:
    libc = _libc()
    if libc is not None:
        libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: what the shell starts stays below
        libc.prctl(15, b"sandhub-term", 0, 0, 0)  # PR_SET_NAME
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    listener = listen(config["path"])
    holder: Holder = (Shell if config.get("mode") == "shell" else Terminal)(config, listener)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    sys.stdout = sys.stderr
    holder.serve()


def listen(path: str) -> socket.socket:
    """A socket listening at `path`, which appears there only once it listens: an agent that
    finds a socket nobody listens on takes it for a dead holder's and removes it. Bound under
    a name of its own, then linked into place: a link fails if the name is taken (another
    holder of that id started at the same moment), and this holder then ends."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    temporary = f"{os.path.dirname(path)}/.{os.getpid()}.new"
    listener.bind(temporary)
    try:
        os.chmod(temporary, 0o600)
        listener.listen(16)
        os.link(temporary, path)
    finally:
        os.unlink(temporary)
    return listener
