"""Egress modes (issue 27): off, allowlist or public, each sandbox's within its team's policy.

A sandbox whose mode is not off reaches only the platform's egress proxy (the backends see
to it); the proxy asks DatabasePolicySource (egress_source.py) what it may reach. Here: the
mode and allow-list a new sandbox gets (create_sandbox), what its backend is told
(egress_spec), the team's policy as its members see and change it, a sandbox's network log.
"""

from __future__ import annotations

import ipaddress
import secrets
from typing import Any

from django.conf import settings

from hosts.backends.base import BackendError, EgressSpec
from hosts.crypto import CredentialKeyError
from sandboxes.contract.egress import EgressBlock, RefusalInfo
from sandboxes.contract.egress_results import NetworkLogInfo, TeamEgressInfo
from sandboxes.contract.errors import InvalidInput, PermissionDenied
from sandboxes.models import EgressRefusal, Sandbox
from sandboxes.policy import access
from sandboxes.policy.access import READ
from sandboxes.services import egress_ca, egress_rules, egress_secrets
from tenants.auditing import AUDIT_VIEW, audited, current
from tenants.models import EGRESS_MODE_ORDER, EgressMode, Team
from tenants.principal import Principal

OFF, ALLOWLIST, PUBLIC = EgressMode.OFF.value, EgressMode.ALLOWLIST.value, EgressMode.PUBLIC.value
MODES = tuple(mode.value for mode in EGRESS_MODE_ORDER)
TOP_REFUSALS = 20


def rank(mode: str) -> int:
    return MODES.index(mode) if mode in MODES else 0


def team_ceiling(team: Team) -> str:
    """The most a sandbox of the team may have now: off when the team may have no network."""
    return team.egress_max_mode if team.allow_network and team.egress_max_mode in MODES else OFF


def choose_mode(team: Team, network: Any) -> str:
    """The mode a new sandbox asked for: True (public if the team allows it, else allowlist),
    False / None (off) or a mode by name; PermissionDenied above the team's policy."""
    if network is None or network is False:
        return OFF
    if network is True:
        ceiling = team_ceiling(team)
        mode = PUBLIC if ceiling == PUBLIC else ALLOWLIST
    elif isinstance(network, str) and network in MODES:
        mode = network
    else:
        raise InvalidInput("network must be true, false, or one of off, allowlist, public")
    if mode != OFF and not team.allow_network:
        raise PermissionDenied(f"team {team.slug} may not give sandboxes network access")
    if rank(mode) > rank(team_ceiling(team)):
        raise PermissionDenied(
            f"team {team.slug} allows network mode {team_ceiling(team)} at most, not {mode}"
        )
    return mode


def effective_allow(team: Team, mode: str, allow: Any) -> list[str]:
    """The allow-list a new sandbox gets: the team's, or the narrower one asked for (each
    entry covered by one of the team's); only an allowlist sandbox has one."""
    if mode != ALLOWLIST:
        if allow:
            raise InvalidInput("allow is for network mode allowlist only")
        return []
    team_rules = [egress_rules.parse(text, "the team's allow-list") for text in _team_list(team)]
    if not team_rules:
        raise InvalidInput(
            f"team {team.slug} has no allow-list yet: a team owner or admin sets it first "
            "(or ask for network public, if the team allows it)"
        )
    if allow is None:
        return egress_rules.canonical(team_rules)
    asked = egress_rules.parse_list(allow, "allow")
    if not asked:
        raise InvalidInput("allow: name at least one entry, or leave it out for the team's list")
    if outside := egress_rules.uncovered(team_rules, asked):
        names = ", ".join(egress_rules.text_of(rule) for rule in outside)
        raise PermissionDenied(f"not in team {team.slug}'s allow-list: {names}")
    return egress_rules.canonical(asked)


def new_token(mode: str) -> str:
    """The sandbox's credential towards the proxy (none when it has no network)."""
    return "" if mode == OFF else secrets.token_urlsafe(32)


def egress_spec(sandbox: Sandbox) -> EgressSpec | None:
    """What the sandbox's backend is told about its network: None when it is off."""
    if sandbox.egress_mode == OFF:
        return None
    try:
        ca_pem = egress_ca.ca_certificate()
    except (CredentialKeyError, ImportError) as exc:  # the sandbox is not made without it
        raise BackendError(f"the deployment's egress CA is not available: {exc}") from exc
    return EgressSpec(
        mode=sandbox.egress_mode,
        proxy_port=settings.SANDHUB_EGRESS_PORT,
        dns_port=settings.SANDHUB_EGRESS_DNS_PORT,
        token=sandbox.egress_token,
        ca_pem=ca_pem,
    )


def sandbox_environment(sandbox: Sandbox) -> dict[str, str]:
    """NAME=placeholder of each secret the sandbox gets (the values stay with the proxy); a
    sandbox with no network gets none."""
    if sandbox.egress_mode == OFF:
        return {}
    return egress_secrets.placeholders(sandbox.team_id, sandbox.owner_id)


def egress_block(sandbox: Sandbox) -> EgressBlock:
    return EgressBlock(
        mode=sandbox.egress_mode, allow=list(sandbox.egress_allow), refused=_refusals(sandbox)
    )


def _refusals(sandbox: Sandbox) -> list[RefusalInfo]:
    rows = EgressRefusal.objects.filter(sandbox=sandbox).order_by("-count", "destination")
    return [RefusalInfo.model_validate(row) for row in rows[:TOP_REFUSALS]]


def _team_list(team: Team) -> list[str]:
    return [text for text in team.egress_allowlist or [] if isinstance(text, str)]


def _team_info(team: Team) -> TeamEgressInfo:
    ceiling = team_ceiling(team)
    modes = [mode for mode in MODES if rank(mode) <= rank(ceiling)]
    if not _team_list(team) and ALLOWLIST in modes:
        modes.remove(ALLOWLIST)  # nothing to allow yet: a create in that mode is refused
    return TeamEgressInfo(
        team=team.slug,
        allow_network=team.allow_network,
        max_mode=team.egress_max_mode,
        allowlist=_team_list(team),
        allowed_ranges=list(team.egress_allowed_ranges or []),
        modes=modes,
    )


@audited("egress.team.get", "team", kind=AUDIT_VIEW)
def get_team_egress(principal: Principal) -> TeamEgressInfo:
    """What the team's sandboxes may reach; every member may read it."""
    team = _acting_team(principal, READ, "see the team's network policy")
    return _team_info(team)


@audited("egress.team.set", "team", atomic=True)
def set_team_egress(
    principal: Principal,
    *,
    allowlist: list[str] | None = None,
    max_mode: str | None = None,
    allowed_ranges: list[str] | None = None,
) -> TeamEgressInfo:
    """Team owners and admins set the allow-list; the maximum mode and the private ranges the
    team may reach anyway only a platform admin (a team may not raise its own ceiling)."""
    team = _acting_team(principal, READ, "change the team's network policy")
    egress_secrets.require_manager(principal, "change the team's network policy")
    team = Team.objects.select_for_update().get(pk=team.pk)
    changed: list[str] = []
    if max_mode is not None:
        if not access.is_platform_admin(principal):
            raise PermissionDenied("only a platform admin may change a team's maximum mode")
        if max_mode not in MODES:
            raise InvalidInput("max_mode must be one of off, allowlist, public")
        current().details["max_mode"] = {"from": team.egress_max_mode, "to": max_mode}
        team.egress_max_mode = max_mode
        changed.append("egress_max_mode")
    if allowlist is not None:
        rules = egress_rules.canonical(egress_rules.parse_list(allowlist, "allowlist"))
        if "*" in rules and not access.is_platform_admin(principal):
            raise InvalidInput("allowlist: '*' allows every name: that is network mode public")
        current().details["allowlist"] = {"from": _team_list(team), "to": rules}
        team.egress_allowlist = rules
        changed.append("egress_allowlist")
    if allowed_ranges is not None:
        if not access.is_platform_admin(principal):
            raise PermissionDenied("only a platform admin may allow address ranges to a team")
        ranges = _cidrs(allowed_ranges)
        current().details["allowed_ranges"] = {"from": team.egress_allowed_ranges, "to": ranges}
        team.egress_allowed_ranges = ranges
        changed.append("egress_allowed_ranges")
    if changed:
        team.save(update_fields=changed)
    return _team_info(team)


def _cidrs(value: Any) -> list[str]:
    """A list of CIDR networks (host bits clear), each in its normal form."""
    if not isinstance(value, list):
        raise InvalidInput('allowed_ranges must be a list of CIDR ranges, e.g. ["10.20.0.0/16"]')
    ranges: list[str] = []
    for text in value:
        try:
            ranges.append(str(ipaddress.ip_network(str(text), strict=True)))
        except ValueError as exc:
            raise InvalidInput(f"allowed_ranges: {text!r} is not a CIDR range: {exc}") from exc
    return ranges


@audited("egress.network_log", "sandbox", kind=AUDIT_VIEW)
def network_log(principal: Principal, sandbox_id: str) -> NetworkLogInfo:
    """The sandbox's mode and allow-list, and the connections the proxy refused it (counted
    per destination and reason, most refused first). Viewers may read it."""
    current().target("sandbox", sandbox_id)
    sandbox = access.get_sandbox(principal, sandbox_id, READ, "see the network log")
    refused = EgressRefusal.objects.filter(sandbox=sandbox).order_by("-count", "destination")
    return NetworkLogInfo(
        sandbox_id=sandbox.public_id,
        mode=sandbox.egress_mode,
        allow=list(sandbox.egress_allow),
        refused=[RefusalInfo.model_validate(row) for row in refused[:500]],
    )


def _acting_team(principal: Principal, need: str, doing: str) -> Team:
    access.require(principal, need, doing)
    if principal.team is None:
        raise InvalidInput(f"a team is needed to {doing}")
    current().target("team", principal.team.slug)
    current().team = principal.team
    return principal.team
