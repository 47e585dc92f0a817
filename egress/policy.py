"""What a sandbox may reach: allow-list rules, secrets bound to destinations, and the source
the proxy asks (the platform's database, a dict in tests).

Names are compared lower-case with any trailing dot removed, as DNS compares them.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from typing import Protocol

DEFAULT_PORTS = frozenset({80, 443})
# A DNS name (labels of letters, digits, '-' and '_'), optionally after "*.", or an IP literal.
_LABEL = r"[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?"
_NAME = re.compile(rf"^(\*\.)?{_LABEL}(\.{_LABEL})*$")


def normalize_host(name: str) -> str:
    """The form names are compared in: lower case, no trailing dot, no IPv6 brackets."""
    name = name.strip().lower().rstrip(".")
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    return name


def is_ip_literal(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class Rule:
    """One allow-list entry: "pypi.org", "*.pythonhosted.org:443", "github.com:22,443"."""

    pattern: str  # lower-case name; "*.x.y" = any name ending ".x.y" (not x.y itself); "*" = any
    ports: frozenset[int] = field(default_factory=frozenset)  # empty = {80, 443}

    def allows(self, name: str, port: int | None) -> bool:
        """Whether this rule lets `name` through on `port` (None: on any port, for DNS)."""
        if not name_matches(self.pattern, name):
            return False
        return port is None or port in (self.ports or DEFAULT_PORTS)


def parse_rule(text: str) -> Rule:
    """A Rule from its text; ValueError saying what is wrong."""
    text = text.strip()
    if not text:
        raise ValueError("an allow-list rule cannot be empty")
    raw, ports = _split_ports(text)
    pattern = normalize_host(raw)
    # "*." must not become "*" (anything) by losing its dot.
    wildcard_dot = pattern == "*" and raw.strip() != "*"
    if wildcard_dot or (pattern != "*" and not _NAME.match(pattern) and not is_ip_literal(pattern)):
        raise ValueError(
            f"{text!r} is not a host name (like pypi.org), a wildcard (like *.example.com) "
            "or an IP address"
        )
    return Rule(pattern=pattern, ports=ports)


def _split_ports(text: str) -> tuple[str, frozenset[int]]:
    # "[::1]:443" and "::1" (no port: an IPv6 literal has colons of its own).
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        if rest and not rest.startswith(":"):
            raise ValueError(f"{text!r}: expected ':' and ports after ']'")
        return host, _parse_ports(text, rest[1:]) if rest else frozenset()
    if text.count(":") == 1:
        host, _, ports = text.partition(":")
        return host, _parse_ports(text, ports)
    return text, frozenset()


def _parse_ports(text: str, ports: str) -> frozenset[int]:
    numbers = set()
    for item in ports.split(","):
        item = item.strip()
        if not item.isdigit() or not 0 < int(item) < 65536:
            raise ValueError(f"{text!r}: {item!r} is not a port (1-65535)")
        numbers.add(int(item))
    return frozenset(numbers)


def name_matches(pattern: str, name: str) -> bool:
    """`name` (normalized) against a rule's pattern: exact, "*.suffix" (strict subdomains
    only) or "*" (anything)."""
    name = normalize_host(name)
    if pattern == "*":
        return True
    if pattern.startswith("*."):
        return name.endswith(pattern[1:]) and len(name) > len(pattern) - 1
    return name == pattern


@dataclass(frozen=True)
class BoundSecret:
    name: str  # e.g. "OPENAI_API_KEY"
    hosts: tuple[str, ...]  # patterns as in Rule.pattern
    header: str  # e.g. "Authorization"
    value: str  # the whole header value, e.g. "Bearer sk-..." (already formatted)
    placeholder: str  # what the sandbox sees in $NAME; replaced by the real value in any header

    def bound_to(self, host: str) -> bool:
        return any(name_matches(normalize_host(pattern), host) for pattern in self.hosts)


@dataclass(frozen=True)
class SandboxPolicy:
    sandbox_id: str
    mode: str  # "allowlist" | "public"
    rules: tuple[Rule, ...] = ()  # allowlist mode
    allowed_ranges: tuple[str, ...] = ()  # CIDRs an admin allowed for the team
    secrets: tuple[BoundSecret, ...] = ()
    dns_answer: str = ""  # the address DNS answers allowed names with ("" = no DNS)

    def allows(self, host: str, port: int | None) -> bool:
        """Whether the name (or IP literal) is allowed on `port` (None: any port) by mode
        and rules. Addresses are checked later, after resolution."""
        if self.mode == "public":
            return True
        if self.mode != "allowlist":
            return False
        host = normalize_host(host)
        if is_ip_literal(host):
            # A raw address only by a rule naming that very address, never by a wildcard.
            return any(rule.pattern == host and rule.allows(host, port) for rule in self.rules)
        return any(rule.allows(host, port) for rule in self.rules)

    def secrets_for(self, host: str) -> tuple[BoundSecret, ...]:
        return tuple(secret for secret in self.secrets if secret.bound_to(host))


class PolicySource(Protocol):
    """Where the proxy learns policies. Called from worker threads (asyncio.to_thread): the
    methods may block (a database query)."""

    def by_address(self, address: str) -> SandboxPolicy | None: ...

    def by_token(self, sandbox_id: str, token: str) -> SandboxPolicy | None: ...

    def report(self, refusals: dict[tuple[str, str, str], int]) -> None:
        """(sandbox_id, destination "name:port", reason) -> count since the last report."""
        ...
