"""What the platform does on the engine's own machine: packet filter rules and loop disks.

Both need the engine to be on this machine (the host's endpoint is the local unix socket) and
the platform to run as root there. A remote engine gets neither from the platform; what its
administrator installs instead is in docs/security.md.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
from collections.abc import Iterator
from typing import TYPE_CHECKING

from hosts.backends.base import BackendError

if TYPE_CHECKING:
    from hosts.models import Host

_COMMAND_TIMEOUT = 30.0  # seconds; iptables waits for its lock (-w), mkfs of a sparse file is fast


def is_local(host: Host) -> bool:
    """The engine runs on this machine: what the platform does here reaches its sandboxes."""
    return host.endpoint.startswith("unix://")


def run(argv: list[str], what: str, stdin: str | None = None) -> str:
    """Run a host command; its stdout, or BackendError with its stderr."""
    try:
        done = subprocess.run(
            argv,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=_COMMAND_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise BackendError(f"{what}: {argv[0]} failed: {exc}") from exc
    if done.returncode != 0:
        # iptables-nft warns on stderr about legacy tables on every call; keep the real error.
        lines = [line for line in done.stderr.splitlines() if not line.startswith("# Warning")]
        detail = " ".join(lines).strip() or f"exit code {done.returncode}"
        raise BackendError(f"{what}: {' '.join(argv[:3])} ...: {detail}")
    return done.stdout


@contextlib.contextmanager
def file_lock(path: str) -> Iterator[None]:
    """An exclusive lock shared by every platform process on this machine (flock on `path`)."""
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)  # closing releases the lock
