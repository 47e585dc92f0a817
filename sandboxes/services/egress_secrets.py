"""Secrets bound to destinations (issue 27): a member stores his own, a team owner or admin
the team's. The value is encrypted (hosts.crypto) and never shown again, nor written in the
audit log; sandboxes see a placeholder, the proxy puts the value on requests to its hosts.
Another team's secret, or another member's own, is not found."""

from __future__ import annotations

import re
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Q, QuerySet

from hosts import crypto
from sandboxes.contract.egress_results import SecretInfo
from sandboxes.contract.errors import Conflict, InvalidInput, NotFound, PermissionDenied
from sandboxes.models import EgressSecret
from sandboxes.policy import access
from sandboxes.policy.access import READ, WRITE
from sandboxes.services import egress_rules
from tenants.auditing import AUDIT_VIEW, audited, current
from tenants.models import Role, Team
from tenants.principal import Principal

MANAGER_ROLES = frozenset({Role.OWNER, Role.ADMIN})
MAX_VALUE_BYTES = 4096
# Values shorter than this would be masked wherever their few characters occur in output.
MIN_VALUE_CHARS = 6
MAX_HOSTS = 20
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,99}$")
_HEADER = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,100}$")
# Variables the platform sets itself (the proxy's), and headers a secret may not replace.
RESERVED_NAMES = frozenset(
    {"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE"}
)
RESERVED_HEADERS = frozenset(
    {"host", "proxy-authorization", "content-length", "transfer-encoding", "connection"}
)


@audited("egress.secret.list", "team", kind=AUDIT_VIEW)
def list_secrets(principal: Principal) -> list[SecretInfo]:
    """The team's secrets and the principal's own, without their values."""
    team = _team(principal, READ, "see secrets")
    current().target("team", team.slug)
    return [SecretInfo.from_model(s) for s in _visible(principal, team)]


@audited("egress.secret.add", "secret", atomic=True)
def add_secret(
    principal: Principal,
    *,
    name: str,
    hosts: list[str],
    value: str,
    header: str = "Authorization",
    template: str = "Bearer {value}",
    team_wide: bool = False,
) -> SecretInfo:
    """Store a secret for the given hosts; team_wide (owners and admins): for every sandbox
    of the team, else for the principal's own sandboxes only."""
    team = _team(principal, WRITE, "add secrets")
    if team_wide:
        require_manager(principal, "add team-wide secrets")
    elif principal.user is None:
        raise InvalidInput("a secret of one's own needs a user; add it team-wide")
    fields = {
        "name": _name(name),
        "hosts": _hosts(hosts),
        "header": _header(header),
        "template": _template(template),
    }
    encrypted = crypto.encrypt(_value(value))
    current().details.update({**fields, "team_wide": bool(team_wide)})
    owner = None if team_wide else principal.user
    if EgressSecret.objects.filter(team=team, user=owner, name=fields["name"]).exists():
        raise Conflict(f"a secret named {fields['name']} exists already; delete it first")
    try:
        with transaction.atomic():
            secret = EgressSecret.objects.create(
                team=team,
                user=owner,
                value_encrypted=encrypted,
                created_by=principal.user,
                **fields,
            )
    except IntegrityError as exc:  # a concurrent add took the name
        raise Conflict(f"a secret named {fields['name']} exists already") from exc
    current().target("secret", secret.pk)
    return SecretInfo.from_model(secret)


@audited("egress.secret.delete", "secret", atomic=True)
def delete_secret(principal: Principal, secret_id: int) -> SecretInfo:
    """Delete one of the principal's own secrets, or (owners and admins) a team-wide one."""
    current().target("secret", secret_id)
    team = _team(principal, WRITE, "delete secrets")
    if isinstance(secret_id, bool) or not isinstance(secret_id, int):
        raise InvalidInput("secret id must be an integer")
    secret = _visible(principal, team).filter(pk=secret_id).first()
    if secret is None:
        raise NotFound(f"secret {secret_id} not found")
    if secret.user_id is None:
        require_manager(principal, "delete team-wide secrets")
    current().details.update({"name": secret.name, "team_wide": secret.user_id is None})
    info = SecretInfo.from_model(secret)
    secret.delete()
    return info


def applicable(team_id: int, user_id: int | None) -> list[EgressSecret]:
    """The secrets a sandbox of this team and owner gets: the team's, and the owner's own
    (which win over a team-wide one of the same name)."""
    scope = Q(user__isnull=True) if user_id is None else Q(user__isnull=True) | Q(user_id=user_id)
    chosen: dict[str, EgressSecret] = {}
    for secret in EgressSecret.objects.filter(scope, team_id=team_id).order_by("pk"):
        # Whatever the order: the owner's own replaces a team-wide one, never the reverse.
        if secret.user_id is not None or secret.name not in chosen:
            chosen[secret.name] = secret
    return list(chosen.values())


def placeholders(team_id: int, user_id: int | None) -> dict[str, str]:
    """NAME=placeholder of each secret a sandbox gets (never a value)."""
    return {secret.name: secret.placeholder for secret in applicable(team_id, user_id)}


def header_value(secret: EgressSecret) -> str:
    """The whole header value the proxy sends (the template filled with the value)."""
    return secret.template.replace("{value}", crypto.decrypt(secret.value_encrypted))


def _visible(principal: Principal, team: Team) -> QuerySet[EgressSecret]:
    rows = EgressSecret.objects.filter(team=team).select_related("user", "created_by")
    if access.is_platform_admin(principal):  # the system, or staff in Django admin: all
        return rows
    if principal.user is None:
        return rows.filter(user__isnull=True)
    return rows.filter(Q(user__isnull=True) | Q(user=principal.user))


def _team(principal: Principal, need: str, doing: str) -> Team:
    access.require(principal, need, doing)
    if principal.team is None:
        raise InvalidInput(f"a team is needed to {doing}")
    return principal.team


def require_manager(principal: Principal, doing: str) -> None:
    if access.role_of(principal) not in MANAGER_ROLES:
        raise PermissionDenied(f"only a team owner or admin may {doing}")
    if principal.scopes is not None and "admin" not in principal.scopes:
        raise PermissionDenied(f"this API key has no admin scope, needed to {doing}")


def _name(name: Any) -> str:
    if not isinstance(name, str) or not _ENV_NAME.match(name):
        raise InvalidInput(
            "name must be an environment variable name (letters, digits, _; not starting "
            "with a digit), like OPENAI_API_KEY"
        )
    if name.upper() in RESERVED_NAMES:
        raise InvalidInput(f"{name} is set by the platform itself; choose another name")
    return name


def _hosts(hosts: Any) -> list[str]:
    if isinstance(hosts, str):
        hosts = [h for h in hosts.replace(",", " ").split() if h]
    rules = egress_rules.parse_list(hosts, "hosts")
    if not rules or len(rules) > MAX_HOSTS:
        raise InvalidInput(f"hosts: name 1 to {MAX_HOSTS} hosts the secret is for")
    if any(rule.ports for rule in rules):
        raise InvalidInput("hosts: names only (a secret goes to its hosts on any port)")
    if any(rule.pattern == "*" for rule in rules):
        raise InvalidInput("hosts: '*' would send the secret everywhere; name its hosts")
    return egress_rules.canonical(rules)


def _header(header: Any) -> str:
    if not isinstance(header, str) or not _HEADER.match(header):
        raise InvalidInput("header must be an HTTP header name, like Authorization or x-api-key")
    if header.lower() in RESERVED_HEADERS:
        raise InvalidInput(f"header {header} is the proxy's own; choose another")
    return header


def _template(template: Any) -> str:
    if not isinstance(template, str) or "{value}" not in template:
        raise InvalidInput('template must contain {value}, like "Bearer {value}"')
    if len(template) > 200 or any(c in template for c in "\r\n\x00"):
        raise InvalidInput("template: one line of at most 200 characters")
    return template


def _value(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidInput("value must be a non-empty string")
    if len(value) < MIN_VALUE_CHARS:
        raise InvalidInput(f"value: at least {MIN_VALUE_CHARS} characters (a real secret's)")
    if len(value.encode()) > MAX_VALUE_BYTES:
        raise InvalidInput(f"value: at most {MAX_VALUE_BYTES} bytes")
    if any(c in value for c in "\r\n\x00"):
        raise InvalidInput("value must be one line (no newline)")
    return value
