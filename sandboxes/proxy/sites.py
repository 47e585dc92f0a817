"""Whether the preview domain shares a *site* (a registrable domain) with the platform.

Browsers send `SameSite=Lax` cookies to every request within a site, and let a page set
cookies on its registrable domain: previews at *.preview.sandhub.example.com are one site
with the platform at sandhub.example.com, so a tenant's app gets much closer to the
platform's session than on a domain of its own (*.sandhub-preview.net). Start-up says so: a
system check Warning (manage.py check, migrate) and one log line when the web process
loads the proxy.

The registrable domain is reckoned without the Public Suffix List (no new dependency): the
last two labels, three under a common second-level suffix of a country (co.uk, com.au, ...),
and for *.localhost the label before localhost. Good enough to warn; not a security decision.
"""

from __future__ import annotations

import ipaddress
import logging

from django.conf import settings
from django.core import checks

logger = logging.getLogger("sandhub.previews")
CHECK_ID = "sandhub.W024"
# Second-level labels under which countries register names: co.uk, com.au, ac.jp, ...
COUNTRY_SECOND_LEVELS = frozenset(
    {"ac", "co", "com", "edu", "gen", "go", "gob", "gov", "gv", "ltd", "mil", "ne", "net"}
    | {"nic", "nom", "or", "org", "plc", "sch"}
)
SAMPLE_LABEL = "8000-sb-example"  # a preview's host name is LABEL.<preview domain>


def site_of(host: str) -> str | None:
    """The registrable domain of a host name; None for an IP address, '*' or nothing."""
    name = host.strip().lower().lstrip(".").rstrip(".")
    if name.startswith("["):
        return None  # an IPv6 literal
    if name.count(":") == 1:
        name = name.split(":")[0]  # a port
    if not name or "*" in name or ":" in name or _is_ip(name):
        return None
    labels = name.split(".")
    if labels[-1] == "localhost":
        return ".".join(labels[-2:])
    if len(labels) >= 3 and labels[-2] in COUNTRY_SECOND_LEVELS and len(labels[-1]) == 2:
        return ".".join(labels[-3:])
    return ".".join(labels[-2:])


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def shared_site() -> tuple[str, str] | None:
    """(the platform's host name, the site it shares with the previews), if any."""
    domain = str(getattr(settings, "SANDHUB_PREVIEW_DOMAIN", "") or "").strip(".").lower()
    if not domain:
        return None
    previews = site_of(f"{SAMPLE_LABEL}.{domain}")
    for host in settings.ALLOWED_HOSTS:
        if previews is not None and site_of(host) == previews:
            return host, previews
    return None


def _advice(host: str, site: str) -> str:
    return (
        f"SANDHUB_PREVIEW_DOMAIN ({settings.SANDHUB_PREVIEW_DOMAIN}) is on the site {site}, "
        f"as the platform's host {host} is: the previews' apps share a site with the "
        "platform's pages (SameSite cookies reach across it, cookies may be set on it)"
    )


HINT = (
    "Serve previews from a registrable domain of their own: platform at "
    "sandhub.example.com, previews at *.sandhub-preview.net (docs/security.md, Previews)."
)


def check_preview_site(app_configs: object = None, **kwargs: object) -> list[checks.CheckMessage]:
    """The system check (registered by sandboxes.apps)."""
    shared = shared_site()
    if shared is None:
        return []
    return [checks.Warning(_advice(*shared), hint=HINT, id=CHECK_ID)]


def log_shared_site() -> None:
    shared = shared_site()
    if shared is not None:
        logger.warning("%s. %s", _advice(*shared), HINT)
