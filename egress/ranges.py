"""Destination addresses the proxy refuses unless a team's admin allowed a range: private,
loopback, link-local, CGNAT, multicast, reserved, and every address of this machine."""

from __future__ import annotations

import functools
import ipaddress
import json
import socket
import subprocess
from collections.abc import Iterable

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address

REFUSED_NETWORKS: tuple[Network, ...] = tuple(
    ipaddress.ip_network(cidr)
    for cidr in (
        "0.0.0.0/8",
        "10.0.0.0/8",
        "100.64.0.0/10",
        "127.0.0.0/8",
        "169.254.0.0/16",
        "172.16.0.0/12",
        "192.0.0.0/24",
        "192.168.0.0/16",
        "198.18.0.0/15",
        "224.0.0.0/4",
        "240.0.0.0/4",
        "::/128",
        "::1/128",
        "fc00::/7",
        "fe80::/10",
        "ff00::/8",
    )
)


def parse_ranges(cidrs: Iterable[str]) -> tuple[Network, ...]:
    """The CIDRs that parse (a bad one in a team's list must not open or break anything)."""
    networks = []
    for cidr in cidrs:
        try:
            networks.append(ipaddress.ip_network(cidr.strip(), strict=False))
        except ValueError:
            continue
    return tuple(networks)


def refused_address(address: str, allowed: tuple[Network, ...] = ()) -> bool:
    """Whether `address` may not be connected to (unparsable addresses are refused)."""
    try:
        ip: Address = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return True
    # ::ffff:10.0.0.1 reaches 10.0.0.1: judge the IPv4 address inside.
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if any(ip in network for network in allowed if network.version == ip.version):
        return False
    if ip in local_addresses():
        return True
    return any(ip in network for network in REFUSED_NETWORKS if network.version == ip.version)


@functools.cache
def local_addresses() -> frozenset[Address]:
    """This machine's interface addresses, read once (`ip -j addr`, else the addresses the
    host name resolves to)."""
    found: set[str] = set()
    try:
        output = subprocess.run(
            ["ip", "-j", "addr"], capture_output=True, check=True, timeout=5
        ).stdout
        for interface in json.loads(output):
            for info in interface.get("addr_info", []):
                found.add(str(info.get("local", "")))
    except (OSError, subprocess.SubprocessError, ValueError):
        pass
    try:
        for info in socket.getaddrinfo(socket.gethostname(), None):
            found.add(str(info[4][0]))
    except OSError:
        pass
    addresses = set()
    for text in found:
        try:
            addresses.add(ipaddress.ip_address(text.split("%", 1)[0]))
        except ValueError:
            continue
    return frozenset(addresses)
