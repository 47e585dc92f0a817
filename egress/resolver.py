"""Name resolution for the proxy, with the operator's override map (SANDHUB_EGRESS_HOSTS).

A name in the map is trusted: the operator said where it goes, so the proxy does not refuse
its address for being private (that is how tests and on-premises services are reached).
"""

from __future__ import annotations

import socket
from collections.abc import Mapping

from egress.policy import is_ip_literal, normalize_host


class Resolver:
    def __init__(self, overrides: Mapping[str, str] | None = None) -> None:
        self._overrides = {
            normalize_host(name): address for name, address in (overrides or {}).items()
        }

    def resolve(self, name: str) -> list[str]:
        """Addresses of `name`: the override, an IP literal itself, else getaddrinfo (may
        block: call from a worker thread). [] when the name does not resolve."""
        name = normalize_host(name)
        if name in self._overrides:
            return [self._overrides[name]]
        if is_ip_literal(name):
            return [name]
        try:
            infos = socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)
        except (socket.gaierror, UnicodeError):
            return []
        addresses: list[str] = []
        for _family, _type, _proto, _name, sockaddr in infos:
            address = str(sockaddr[0]).split("%", 1)[0]  # no IPv6 zone
            if address not in addresses:
                addresses.append(address)
        return addresses

    def trusted(self, name: str) -> bool:
        return normalize_host(name) in self._overrides
