"""The packet filter rules of one sandbox network, and the plans that install, remove and
repair them (network.py reads the rules and runs the plans).

A sandbox network routes only to the platform's egress proxy on this machine (issue 27):

    nat PREROUTING   tcp to <gateway> ports 80,443  REDIRECT to <proxy port>  (transparent
                     HTTP and HTTPS: the proxy's DNS answers allowed names with the gateway)
                     udp port 53, to any address    REDIRECT to <dns port>
    filter INPUT     from the network's subnet to <gateway>: tcp <proxy port>, udp <dns port>
                     ACCEPT, then anything new the sandbox starts towards the host REJECT
    DOCKER-USER      everything from the bridge REJECT: nothing is forwarded (no raw IP, no
                     other UDP, no ICMP, no other sandbox, no link-local metadata service)

The ACCEPT rules name the subnet (only the sandbox's container is on it): a packet the
sandbox sends with another sandbox's address as its source (IP_FREEBIND needs no capability)
is refused, so the proxy, which tells sandboxes apart by address, is never misled.

A network made before egress (no ports label) gets the fence alone: INPUT and DOCKER-USER
rejects, no way out at all, until the sandbox is made again.

Every rule carries the comment `sandhub:<network name>`; `-S` listings are grouped by it.
"""

from __future__ import annotations

import hashlib
import shlex
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

BRIDGE_PREFIX = "sbx-"
TAG_PREFIX = "sandhub:"
TABLES = ("filter", "nat")
# The proxy's ports, written on the network when it is made, so that a repair (ensure_all)
# puts back the same rules without asking anyone: "<proxy port>,<dns port>".
LABEL_EGRESS_PORTS = "org.sandhub.egress-ports"
_REJECT = ["-j", "REJECT", "--reject-with", "icmp-admin-prohibited"]

# (table, chain, rule words) in the order the rules must have within their chain.
Rule = tuple[str, str, list[str]]
# A tag's rules as `-S` prints them: (table, line).
Listing = dict[str, list[tuple[str, str]]]


def bridge_name(network: str) -> str:
    """The bridge interface of a sandbox network (at most 15 characters, as Linux allows)."""
    return BRIDGE_PREFIX + hashlib.sha256(network.encode()).hexdigest()[:11]


@dataclass(frozen=True)
class Fence:
    """What a network's rules depend on: its name, its addresses, the proxy's ports."""

    network: str
    gateway: str = ""
    subnet: str = ""
    proxy_port: int = 0
    dns_port: int = 0

    @property
    def egress(self) -> bool:
        return bool(self.gateway and self.subnet and self.proxy_port and self.dns_port)


def ports_label(proxy_port: int, dns_port: int) -> dict[str, str]:
    return {LABEL_EGRESS_PORTS: f"{proxy_port},{dns_port}"}


def fence_of(summary: dict[str, Any]) -> Fence:
    """The fence of a network as the engine lists or inspects it (labels and IPAM)."""
    name = str(summary.get("Name") or "")
    labels = summary.get("Labels") or {}
    configs = (summary.get("IPAM") or {}).get("Config") or []
    ipv4 = [c for c in configs if ":" not in str(c.get("Subnet", ""))]
    gateway = str(ipv4[0].get("Gateway") or "") if ipv4 else ""
    subnet = str(ipv4[0].get("Subnet") or "") if ipv4 else ""
    try:
        proxy, dns = (int(p) for p in str(labels.get(LABEL_EGRESS_PORTS, "")).split(","))
    except ValueError:
        return Fence(name)  # made before egress: the fence alone
    return Fence(name, gateway=gateway, subnet=subnet, proxy_port=proxy, dns_port=dns)


def rules(fence: Fence) -> list[Rule]:
    """The network's rules, each chain's in the order they must have."""
    bridge = bridge_name(fence.network)
    tag = ["-m", "comment", "--comment", TAG_PREFIX + fence.network]
    found: list[Rule] = []
    if fence.egress:
        to_proxy = ["-i", bridge, "-s", fence.subnet, "-d", fence.gateway]
        found += [
            ("nat", "PREROUTING", ["-i", bridge, "-d", fence.gateway, "-p", "tcp", "-m",
                                   "multiport", "--dports", "80,443", *tag, "-j", "REDIRECT",
                                   "--to-ports", str(fence.proxy_port)]),
            ("nat", "PREROUTING", ["-i", bridge, "-p", "udp", "--dport", "53", *tag,
                                   "-j", "REDIRECT", "--to-ports", str(fence.dns_port)]),
            ("filter", "INPUT", [*to_proxy, "-p", "tcp", "--dport", str(fence.proxy_port),
                                 *tag, "-j", "ACCEPT"]),
            ("filter", "INPUT", [*to_proxy, "-p", "udp", "--dport", str(fence.dns_port),
                                 *tag, "-j", "ACCEPT"]),
        ]  # fmt: skip
    # Replies to connections the host opened (an operator's curl) stay allowed; anything else
    # the sandbox starts towards the host is refused, to whichever of its addresses.
    to_host = ["-i", bridge, "-m", "conntrack", "!", "--ctstate", "RELATED,ESTABLISHED"]
    found.append(("filter", "INPUT", [*to_host, *tag, *_REJECT]))
    found.append(("filter", "DOCKER-USER", ["-i", bridge, *tag, *_REJECT]))
    return found


def expected(fence: Fence) -> Counter[tuple[str, str]]:
    """How many rules each (table, chain) holds for the network when it is complete."""
    return Counter((table, chain) for table, chain, _ in rules(fence))


def tag_of(line: str) -> str:
    if TAG_PREFIX not in line:
        return ""
    try:
        words = shlex.split(line)
    except ValueError:
        return ""
    for i, word in enumerate(words[:-1]):
        if word == "--comment" and words[i + 1].startswith(TAG_PREFIX):
            return words[i + 1]
    return ""


def deletions(lines: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    # `-S` prints each rule as the `-A` command that makes it; `-D` with the same words
    # deletes exactly that rule.
    return [(table, "-D" + line[2:]) for table, line in lines if line.startswith("-A ")]


def insertions(fence: Fence) -> list[tuple[str, str]]:
    """Commands that put the rules at the top of their chains, in their order: each goes in
    at position 1, so a chain's rules go in last first."""
    return [
        (table, " ".join(["-I", chain, "1", *words]))
        # Plain words: iptables-restore knows double quotes only, and no word needs them.
        for table, chain, words in reversed(rules(fence))
    ]


def fix(listing: Listing, fences: list[Fence], *, drop_others: bool) -> list[tuple[str, str]]:
    """(table, command) that leave each network with exactly its rules (and, with
    drop_others, no rules for any other network)."""
    commands: list[tuple[str, str]] = []
    for fence in fences:
        present = listing.get(TAG_PREFIX + fence.network, [])
        chains = Counter((table, line.split()[1]) for table, line in present)
        if chains == expected(fence):
            continue
        commands += deletions(present)
        commands += insertions(fence)
    if drop_others:
        wanted = {TAG_PREFIX + fence.network for fence in fences}
        for tag, lines in listing.items():
            if tag not in wanted:
                commands += deletions(lines)
    return commands


def restore_input(commands: list[tuple[str, str]]) -> str:
    """One iptables-restore input: a section per table that changes, each committed whole
    (filter first: a new network's fence is in before its redirects)."""
    text = ""
    for table in TABLES:
        lines = [command for each, command in commands if each == table]
        if lines:
            text += f"*{table}\n" + "\n".join(lines) + "\nCOMMIT\n"
    return text
