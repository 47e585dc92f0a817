"""The egress policy on isolated SSH hosts: where a sandbox's network may go (only to the
platform's egress proxy), and what the sandbox is told (the proxy in its environment, the
deployment's CA in its trust store). isolation.py runs the shell parts.

    route = route_for(spec.egress, conn.target.address, host.options.get("egress_proxy"))
    env = proxy_variables(sandbox_id, spec.egress, route)     # into the sandbox's env

The sandbox's user-mode networking (slirp4netns) makes every connection of the sandbox as
the sandbox's user on the host; an iptables chain of that uid's own (`SANDHUB-EGRESS-<uid>`)
then ACCEPTs TCP to the proxy and REJECTs everything else: the host's other ports and
addresses, link-local, other interfaces, every UDP packet (slirp4netns's DNS forwarder at
10.0.2.3 included: clients that honour HTTP_PROXY never resolve a name themselves). The
policy (which names, which secrets) lives in the proxy; the firewall is the same for both
modes.

Where the proxy is: on the platform's machine. An SSH host that is this machine (its address
is loopback) reaches it at 127.0.0.1:<proxy_port>, and slirp4netns, allowed the host's
loopback, gives the sandbox that as 10.0.2.2. A remote host says how it reaches the proxy in
its option `egress_proxy` ("address:port": a tunnel or a forwarded port on its loopback, or
an address on its network); without it, egress modes are refused there.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any

from hosts.backends.base import BackendError, EgressSpec
from hosts.backends.egress import proxy_environment, proxy_url

__all__ = [
    "BINDS",
    "FIREWALL",
    "HOST_LOOPBACK",
    "OPTION",
    "EgressRoute",
    "is_this_machine",
    "proxy_variables",
    "route_for",
    "route_from_state",
    "TRUST",
]

OPTION = "egress_proxy"  # the SSH host's option: how it reaches the proxy, "address:port"
HOST_LOOPBACK = "10.0.2.2"  # slirp4netns's name, inside the sandbox, for the host's 127.0.0.1
_LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class EgressRoute:
    """How an isolated sandbox's network reaches the egress proxy, and nothing else."""

    mode: str  # "allowlist" | "public" (the proxy's business: kept for the state's reader)
    address: str  # what the sandbox connects to (HTTP_PROXY's host)
    port: int
    firewall_address: str  # the one destination the uid's chain accepts (on the host)
    host_loopback: bool  # slirp4netns lets the sandbox reach the host's loopback (10.0.2.2)

    def as_state(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "address": self.address,
            "port": self.port,
            "firewall_address": self.firewall_address,
            "host_loopback": self.host_loopback,
        }

    def shell_variables(self) -> dict[str, str]:
        """isolation.HOLDER's variables: egress_port empty means the legacy network."""
        return {
            "egress_addr": self.firewall_address,
            "egress_port": str(self.port),
            "egress_loopback": "1" if self.host_loopback else "",
        }


def is_this_machine(address: str) -> bool:
    """The SSH host is the platform's own machine: its address is loopback (the test's sshd,
    an operator's local host). The hook tests replace to pretend a host is remote."""
    if address.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(address.strip("[]")).is_loopback
    except ValueError:
        return False


def route_for(egress: EgressSpec, host_address: str, option: object = None) -> EgressRoute:
    """Where the sandbox's proxy is, seen from an SSH host at host_address; BackendError
    (before anything is made) when that cannot be told."""
    if egress.mode not in ("allowlist", "public"):
        raise BackendError(f"unknown egress mode {egress.mode!r}")
    if option:
        address, port = _parse_option(option)
    elif is_this_machine(host_address):
        try:
            address, port = _LOOPBACK, _check_port(egress.proxy_port, "the proxy's port")
        except ValueError as exc:
            raise BackendError(str(exc)) from None
    else:
        raise BackendError(
            f"the SSH host at {host_address} is not this machine, and the platform's egress "
            f"proxy is: set the host's option {OPTION!r} to the address:port at which that "
            "host reaches the proxy (e.g. 127.0.0.1:3128 through a tunnel) for sandboxes "
            "there to have network, or create the sandbox without network"
        )
    loopback = ipaddress.ip_address(address).is_loopback
    if loopback and address != _LOOPBACK:
        raise BackendError(
            f"{OPTION} {address}:{port}: of the loopback, sandboxes reach only 127.0.0.1"
        )
    return EgressRoute(
        mode=egress.mode,
        address=HOST_LOOPBACK if loopback else address,
        port=port,
        firewall_address=address,
        host_loopback=loopback,
    )


def route_from_state(state: dict[str, Any]) -> EgressRoute | None:
    """The route provision kept in the sandbox's state (None: no egress policy there)."""
    kept = state.get("egress")
    if not isinstance(kept, dict):
        return None
    try:
        address = str(ipaddress.ip_address(str(kept["firewall_address"])))
        return EgressRoute(
            mode=str(kept["mode"]),
            address=str(ipaddress.ip_address(str(kept["address"]))),
            port=_check_port(kept["port"], "the egress port"),
            firewall_address=address,
            host_loopback=bool(kept["host_loopback"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise BackendError(f"not an egress route in the sandbox's state: {exc}") from None


def proxy_variables(sandbox_id: str, egress: EgressSpec, route: EgressRoute) -> dict[str, str]:
    """The variables that send the sandbox's clients to the proxy, with its credential."""
    return proxy_environment(proxy_url(sandbox_id, egress.token, route.address, route.port))


def _parse_option(option: object) -> tuple[str, int]:
    text = str(option).strip()
    address, colon, port_text = text.rpartition(":")
    address = address.strip("[]")
    if address.lower() == "localhost":
        address = _LOOPBACK
    try:
        if not colon:
            raise ValueError("no port")
        parsed = ipaddress.ip_address(address)
        if parsed.version != 4:
            raise ValueError("slirp4netns gives sandboxes IPv4 only")
        return str(parsed), _check_port(port_text, "its port")
    except ValueError as exc:
        raise BackendError(
            f"the host option {OPTION}={text!r} is not an IPv4 address:port ({exc})"
        ) from None


def _check_port(value: object, what: str) -> int:
    port = int(str(value))
    if not 0 < port < 65536:
        raise ValueError(f"{what} {value} is not a TCP port")
    return port


# -- the shell parts (POSIX sh, as root; isolation.py puts them into START and HOLDER) --------

# START, provision only: the trust bundle comes on the script's stdin (never in an argv: the
# system's CAs alone are more than one argument may hold), root's, readable by all.
TRUST = """\
if [ -n "$egress_port" ]; then
  mkdir -m 0755 -- "$dir/trust" || fail "cannot make $dir/trust"
  cat > "$dir/trust/ca-bundle.crt" && chmod 0644 -- "$dir/trust/ca-bundle.crt" \\
    && [ -s "$dir/trust/ca-bundle.crt" ] || fail "no trust bundle for the sandbox on stdin"
fi
"""

# HOLDER, while bubblewrap's arguments are made: the bundle bound read-only where clients look.
# bubblewrap mounts only on what exists, and the sandbox's /etc is the host's, read-only: an
# empty /etc/sandhub made once on the host is the mount point (nothing else is written there).
BINDS = """\
if [ -n "$egress_port" ]; then
  [ -s "$dir/trust/ca-bundle.crt" ] || fail "the sandbox's trust bundle is gone"
  if [ ! -d /etc/sandhub ]; then
    mkdir -m 0755 /etc/sandhub || fail "cannot make the mount point /etc/sandhub"
  fi
  set -- "$@" --ro-bind "$dir/trust" /etc/sandhub
  if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
    set -- "$@" --ro-bind "$dir/trust/ca-bundle.crt" /etc/ssl/certs/ca-certificates.crt
  fi
fi
"""

# HOLDER, before slirp4netns starts: the uid's own chain, TCP to the proxy and nothing else
# (UDP refused by a rule of its own, whose counter tells a refused DNS query). The uid is
# noted first: STOP drops the chain by it even if the user is gone by then.
FIREWALL = """\
egress_firewall() {
  uchain="$chain-$uid"
  echo "$uid" > "$dir/egress-uid"
  iptables -w -N "$uchain" 2>/dev/null || iptables -w -F "$uchain" \\
    || fail "cannot make the sandbox's egress chain (iptables)"
  iptables -w -A "$uchain" -p tcp -d "$egress_addr" --dport "$egress_port" -j ACCEPT
  iptables -w -A "$uchain" -p udp -j REJECT
  iptables -w -A "$uchain" -j REJECT
  iptables -w -I OUTPUT 1 -m owner --uid-owner "$uid" -j "$uchain" \\
    || fail "cannot add the sandbox's egress rule (iptables)"
}
"""
