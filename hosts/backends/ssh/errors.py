"""Errors of the SSH connection layer, all under one `SshError` (a `BackendError`).

Every message is written for an admin reading it in a host's status or an audit row: it
names the host and what went wrong, never a password, passphrase or key.
"""

from __future__ import annotations

from hosts.backends.base import BackendError, HostKeyRejected


class SshError(BackendError):
    """Anything that went wrong talking to an SSH host."""


class SshUnreachable(SshError):
    """No SSH session could be set up: DNS, TCP connect, or the SSH handshake failed."""


class SshConnectionLost(SshError):
    """An established connection broke (the host went away, sshd was killed or restarted)."""


class SshTimeout(SshError):
    """A command, or opening a channel, took longer than allowed."""


class HostKeyError(SshError, HostKeyRejected):
    """The host's key is not the confirmed one: nothing was sent to the host after the key.
    As a HostKeyRejected, it carries what the host presented (`fingerprint`, `key_type`):
    the probes remember it for the admin, with an audit row."""


class HostKeyNotPinned(HostKeyError):
    """No fingerprint is confirmed for this host yet: the admin must confirm one first."""

    def __init__(self, host: str, fingerprint: str, key_type: str) -> None:
        self.host = host
        super().__init__(
            f"host key not confirmed for {host}: fetch and confirm fingerprint {fingerprint} "
            f"({key_type}) in admin before Sandhub connects",
            key_type=key_type,
            fingerprint=fingerprint,
        )


class HostKeyChanged(HostKeyError):
    """The host presented a key other than the pinned one (a reinstall, or an impostor)."""

    def __init__(self, host: str, expected: str, actual: str, key_type: str) -> None:
        self.host = host
        self.expected = expected
        self.actual = actual
        super().__init__(
            f"host key of {host} changed: expected {expected}, the host presented {actual} "
            f"({key_type}); refusing to connect. If the host was reinstalled, confirm the new "
            "fingerprint in admin",
            key_type=key_type,
            fingerprint=actual,
        )


class AuthenticationFailed(SshError):
    """The host refused the login (wrong password, a key it does not know, method not allowed)."""


class PrivateKeyError(SshError):
    """The configured private key cannot be used (unreadable, wrong passphrase, unknown type)."""
