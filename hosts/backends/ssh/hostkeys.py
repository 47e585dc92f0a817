"""Host keys: fingerprints in OpenSSH's format, fetching a host's key, checking a pin.

A host is never trusted on first use: an admin fetches its key (`fetch_host_key`), compares
the fingerprint with what the machine's owner reads from `ssh-keygen -lf
/etc/ssh/ssh_host_ed25519_key.pub`, and confirms it. Connections then accept that key only
(`check_host_key`). No known_hosts file is read or written.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass

import paramiko

from hosts.backends.ssh.errors import HostKeyChanged, HostKeyNotPinned
from hosts.backends.ssh.handshake import describe, start_transport


@dataclass(frozen=True)
class HostKey:
    """A server's public host key as an admin is shown it."""

    key_type: str  # "ssh-ed25519", "ssh-rsa", "ecdsa-sha2-nistp256", ...
    fingerprint: str  # "SHA256:<base64 without padding>", as `ssh-keygen -lf` prints it
    public_key: str  # "<key_type> <base64>", a line for known_hosts / authorized_keys

    @classmethod
    def from_pkey(cls, key: paramiko.PKey) -> HostKey:
        return cls(
            key_type=key.get_name(),
            fingerprint=fingerprint(key),
            public_key=f"{key.get_name()} {key.get_base64()}",
        )


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH's SHA256 fingerprint of a public key: "SHA256:" + unpadded base64 of the
    SHA-256 of the key blob (what `ssh-keygen -lf` and `ssh -v` print)."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode("ascii").rstrip("=")


def normalize_fingerprint(value: str) -> str:
    """A pasted fingerprint in canonical form: surrounding space and padding gone, the
    "SHA256:" prefix added if it was left out."""
    value = value.strip()
    if not value.upper().startswith("SHA256:"):
        value = "SHA256:" + value
    return "SHA256:" + value[len("SHA256:") :].rstrip("=")


def fetch_host_key(
    address: str, port: int, timeout: float = 10.0, key_type: str | None = None
) -> HostKey:
    """The key `address:port` presents, read during key exchange; never logs in.

    Without `key_type` the server shows the key paramiko prefers (Ed25519 when the server has
    one), the same one `SshConnection` will be shown, so the fingerprint confirmed is the one
    checked later. Raises SshUnreachable when the host cannot be reached or is not SSH.
    """
    transport = start_transport(address, port, timeout=timeout, host_key_type=key_type)
    try:
        return HostKey.from_pkey(transport.get_remote_server_key())
    finally:
        transport.close()


def check_host_key(key: paramiko.PKey, pinned: str | None, address: str, port: int) -> HostKey:
    """`key` as a HostKey if it is the pinned one; else HostKeyNotPinned / HostKeyChanged."""
    presented = HostKey.from_pkey(key)
    where = describe(address, port)
    if not pinned:
        raise HostKeyNotPinned(where, presented.fingerprint, presented.key_type)
    expected = normalize_fingerprint(pinned)
    if presented.fingerprint != expected:
        raise HostKeyChanged(where, expected, presented.fingerprint, presented.key_type)
    return presented
