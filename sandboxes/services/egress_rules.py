"""Allow-list rules as the services check them: parsed with the proxy's own parser (so what
is stored is what the proxy enforces), and compared: a sandbox's list may only narrow its
team's (the same pattern or one under a team wildcard, on a subset of its ports)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sandboxes.contract.errors import InvalidInput

if TYPE_CHECKING:
    from egress.policy import Rule

# What a rule without ports allows (egress.policy.DEFAULT_PORTS).
DEFAULT_PORTS = frozenset({80, 443})

# More than any team needs; a longer list is a mistake (or an attempt to bloat every policy).
MAX_RULES = 200


def parse(text: Any, what: str) -> Rule:
    """One rule; InvalidInput naming the entry when it is not one."""
    if not isinstance(text, str):
        raise InvalidInput(f"{what}: each entry must be a string like 'pypi.org'; got {text!r}")
    # Imported on use, as the proxy's process imports it: the egress package is a library
    # of its own, and the services load without it until a rule is read.
    from egress.policy import parse_rule

    try:
        return parse_rule(text)
    except ValueError as exc:
        raise InvalidInput(f"{what}: {exc}") from exc


def parse_list(entries: Any, what: str) -> list[Rule]:
    if not isinstance(entries, list | tuple):
        raise InvalidInput(f"{what} must be a list of rules like 'pypi.org' or '*.x.org:443'")
    if len(entries) > MAX_RULES:
        raise InvalidInput(f"{what}: at most {MAX_RULES} entries")
    return [parse(entry, what) for entry in entries]


def text_of(rule: Rule) -> str:
    """The canonical text of a rule (what is stored): the pattern, and its ports if any."""
    host = f"[{rule.pattern}]" if ":" in rule.pattern else rule.pattern
    if not rule.ports:
        return host
    return f"{host}:{','.join(str(port) for port in sorted(rule.ports))}"


def canonical(rules: list[Rule]) -> list[str]:
    """The rules' texts, each once, in the order given."""
    return list(dict.fromkeys(text_of(rule) for rule in rules))


def pattern_covers(allowed: str, asked: str) -> bool:
    """Whether every name `asked` matches is one `allowed` matches."""
    if allowed == "*" or allowed == asked:
        return True
    if allowed.startswith("*."):
        # "*.x.org" covers "a.x.org" and "*.a.x.org", not "x.org" itself, nor "*".
        return asked != "*" and asked.endswith(allowed[1:])
    return False


def covers(allowed: Rule, asked: Rule) -> bool:
    ports_allowed = allowed.ports or DEFAULT_PORTS
    ports_asked = asked.ports or DEFAULT_PORTS
    return pattern_covers(allowed.pattern, asked.pattern) and ports_asked <= ports_allowed


def uncovered(team_rules: list[Rule], asked: list[Rule]) -> list[Rule]:
    """The asked rules no rule of the team's covers."""
    return [rule for rule in asked if not any(covers(team, rule) for team in team_rules)]
