"""The errors of the backend interface (hosts/backends/base.py re-exports them)."""

from __future__ import annotations


class BackendError(Exception):
    """The host could not do what was asked (unreachable, engine error, ...)."""


class SandboxGone(BackendError):
    """The sandbox's container or directory no longer exists on the host."""


class Unsupported(BackendError):
    pass


class PortClosed(BackendError):
    """Nothing listens on that port inside the sandbox (connection refused), or the listener
    is not the sandbox's own (on a host shared by several sandboxes)."""


class HostKeyRejected(BackendError):
    """The host presented a key that is not the pinned one, or none is pinned yet: nothing
    was sent to it. `fingerprint` is what it presented (SHA256:...), for the admin to check."""

    def __init__(self, message: str, *, key_type: str = "", fingerprint: str = "") -> None:
        super().__init__(message)
        self.key_type, self.fingerprint = key_type, fingerprint


class TerminalGone(BackendError):
    """No terminal or shell session of that id runs in the sandbox: it ended (its shell
    exited, it was closed, or idle too long), or it was never opened there."""
