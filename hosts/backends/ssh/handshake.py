"""Opening the TCP socket and running the SSH handshake, up to (not including) the login.

Shared by `fetch_host_key` (reads the key, never logs in) and `SshConnection`.
"""

from __future__ import annotations

import logging
import socket

import paramiko

from hosts.backends.ssh.errors import SshError, SshUnreachable

# Host key algorithms to offer for a pinned key type. paramiko 5 signs RSA host keys with
# SHA-2 only; the key itself is still called "ssh-rsa".
_RSA_ALGORITHMS = ["rsa-sha2-512", "rsa-sha2-256"]
# Our transports log here: under paramiko's own logger, so its configuration still applies.
LOG_CHANNEL = "paramiko.transport.sandhub"


class _QuietRefusals(logging.Filter):
    """Drop paramiko's ERROR line for each session sshd refuses at its MaxSessions: the
    connection retries those (connection.py) and raises a clear error if it gives up."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "open FAILED" not in record.getMessage()


logging.getLogger(LOG_CHANNEL).addFilter(_QuietRefusals())


def describe(address: str, port: int) -> str:
    """`address:port` as an admin would type it ([v6]:port for IPv6 literals)."""
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def host_key_algorithms(key_type: str) -> list[str]:
    """The algorithms that make the server present its `key_type` key (e.g. "ssh-ed25519")."""
    return list(_RSA_ALGORITHMS) if key_type == "ssh-rsa" else [key_type]


def open_socket(address: str, port: int, timeout: float) -> socket.socket:
    """A connected TCP socket with TCP_NODELAY: without it every small request waits ~40 ms
    for the peer's delayed ACK (Nagle), which makes each command round trip ~45 ms, not ~2."""
    where = describe(address, port)
    try:
        sock = socket.create_connection((address, port), timeout=timeout)
    except socket.gaierror as exc:
        raise SshUnreachable(f"cannot reach {where}: the name does not resolve") from exc
    except ConnectionRefusedError as exc:
        raise SshUnreachable(
            f"cannot reach {where}: connection refused (is sshd running on that port?)"
        ) from exc
    except TimeoutError as exc:
        raise SshUnreachable(
            f"cannot reach {where}: no answer within {round(timeout, 1):g} s"
        ) from exc
    except OSError as exc:
        raise SshUnreachable(f"cannot reach {where}: {exc.strerror or exc}") from exc
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # The kernel's own keepalive as a backstop to the SSH-level one (a vanished peer).
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    except OSError:
        sock.close()
        raise
    return sock


def start_transport(
    address: str, port: int, *, timeout: float, host_key_type: str | None = None
) -> paramiko.Transport:
    """A paramiko client Transport past key exchange (the server's key is known, no login).

    `host_key_type` makes the server present that key (it may hold several: ed25519, rsa,
    ecdsa); without it paramiko's preference picks one (ed25519 first).
    """
    where = describe(address, port)
    sock = open_socket(address, port, timeout)
    try:
        transport = paramiko.Transport(sock)
    except Exception:
        sock.close()
        raise
    transport.set_log_channel(LOG_CHANNEL)
    # paramiko's defaults are 15 s (banner, handshake) and 30 s (auth): bound them all alike.
    transport.banner_timeout = timeout
    transport.handshake_timeout = timeout
    transport.auth_timeout = timeout
    try:
        if host_key_type:
            _offer_only(transport, host_key_type)
        transport.start_client(timeout=timeout)
        # start_client returns quietly when its timeout passes mid-negotiation.
        transport.get_remote_server_key()
    except SshError:
        transport.close()
        raise
    except (paramiko.SSHException, EOFError, OSError) as exc:
        transport.close()
        raise SshUnreachable(f"SSH handshake with {where} failed: {_reason(exc)}") from exc
    return transport


def _offer_only(transport: paramiko.Transport, key_type: str) -> None:
    try:
        transport.get_security_options().key_types = host_key_algorithms(key_type)
    except ValueError as exc:
        raise SshError(f"host key type {key_type!r} is not supported") from exc


def _reason(exc: BaseException) -> str:
    text = str(exc).strip()
    if isinstance(exc, EOFError) or not text:
        return "the server closed the connection"
    if text == "No existing session":
        return "no SSH answer in time"
    if "banner" in text.lower():
        return f"{text} (is it an SSH server?)"
    return text
