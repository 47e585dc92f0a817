"""Where a transparent client meant to connect before the firewall redirected it here."""

from __future__ import annotations

import contextlib
import socket

SO_ORIGINAL_DST = 80  # linux/netfilter_ipv4.h


def original_port(sock: socket.socket) -> int | None:
    """The port a transparent client connected to before the firewall redirected it here
    (SO_ORIGINAL_DST); None when the connection was not redirected."""
    with contextlib.suppress(OSError):
        raw = sock.getsockopt(socket.SOL_IP, SO_ORIGINAL_DST, 16)
        port = int.from_bytes(raw[2:4], "big")
        address = socket.inet_ntoa(raw[4:8])
        # Without a NAT rule, conntrack names this very listener: not a redirection.
        if (address, port) != tuple(sock.getsockname()[:2]):
            return port
    return None
