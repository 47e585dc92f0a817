"""Sandhub's sandboxes in the shapes of E2B's control API (its OpenAPI names: camelCase,
`sandboxID`, `templateID`, RFC 3339 times), and E2B's requests read into Sandhub's terms.

E2B's template is Sandhub's image: `templateID` names an image (its name), and E2B's default
template "base" is the team's default image. `clientID` is a constant: E2B's SDKs require
the field and nothing reads it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sandboxes.contract.results import SandboxInfo

__all__ = ["DEFAULT_TEMPLATES", "ENVD_VERSION", "detail", "listed", "state_of", "template_image"]

# What E2B's SDKs check to know which envd calls a sandbox understands: 0.6.4 is the interface
# e2b_compat/proto describes (octet-stream uploads, entry info in file events, default user).
ENVD_VERSION = "0.6.4"
CLIENT_ID = "sandhub"
DEFAULT_TEMPLATES = frozenset({"", "base"})  # E2B's default: the team's default image


def template_image(template_id: object) -> str | None:
    """The image a templateID asks for (None: the team's default)."""
    text = str(template_id or "").strip()
    return None if text in DEFAULT_TEMPLATES else text


# Sandhub's statuses E2B has no word for: a sandbox being deleted or gone is not listed.
GONE = frozenset({"stopping", "deleted", "lost", "error"})
_PAUSED = frozenset({"pausing", "paused", "halting", "stopped"})


def state_of(info: SandboxInfo) -> str:
    """E2B knows two states: running, and paused (Sandhub's paused and stopped both keep the
    files and come back on resume)."""
    return "paused" if info.status in _PAUSED else "running"


def _time(moment: datetime | None) -> str | None:
    return moment.isoformat().replace("+00:00", "Z") if moment else None


def created(info: SandboxInfo, access_token: str, domain: str | None) -> dict[str, Any]:
    """POST /sandboxes and /sandboxes/{id}/connect: what a client needs to talk to it."""
    return {
        "sandboxID": info.id,
        "templateID": info.image,
        "clientID": CLIENT_ID,
        "envdVersion": ENVD_VERSION,
        "envdAccessToken": access_token,
        "trafficAccessToken": None,
        "domain": domain,
        "alias": info.image,
    }


def listed(info: SandboxInfo) -> dict[str, Any]:
    """One sandbox of GET /v2/sandboxes."""
    return {
        "sandboxID": info.id,
        "templateID": info.image,
        "alias": info.image,
        "clientID": CLIENT_ID,
        "startedAt": _time(info.started_at or info.created_at),
        "endAt": _time(info.expires_at) or _time(info.created_at),
        "cpuCount": max(1, round(info.cpus)),
        "memoryMB": info.memory_mb,
        "diskSizeMB": info.disk_mb or 0,
        "metadata": info.metadata,
        "state": state_of(info),
        "envdVersion": ENVD_VERSION,
    }


def detail(info: SandboxInfo, access_token: str, domain: str | None) -> dict[str, Any]:
    """GET /sandboxes/{id}."""
    return {
        **listed(info),
        "envdAccessToken": access_token,
        "domain": domain,
        "allowInternetAccess": info.network,
    }
