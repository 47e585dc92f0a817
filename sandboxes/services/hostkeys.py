"""Pinning an SSH host's key (platform admins): fetch what the host presents, compare its
fingerprint with one obtained out of band (on the host: `ssh-keygen -lf` of its key), then
confirm. Until a key is confirmed the host gets no sandboxes and no connection logs in; a key
that later differs from the pinned one refuses every connection (hosts/backends/ssh) and is
remembered with an audit row by the probes. Nothing is ever accepted automatically.
"""

from __future__ import annotations

from django.utils import timezone

from hosts.backends import get_backend, reset_backends
from hosts.backends.base import BackendError
from hosts.models import Host
from sandboxes.contract.errors import BackendFailure, Conflict, InvalidInput
from sandboxes.contract.results import HostKeyInfo
from sandboxes.services.hosts import admin_host
from tenants.auditing import AUDIT_READ, audited, current
from tenants.principal import Principal


@audited("host.key.fetch", "host", kind=AUDIT_READ)
def fetch_host_key(principal: Principal, host_id: int) -> HostKeyInfo:
    """Read the key the host presents (no login) and remember it as the one seen."""
    host = admin_host(principal, host_id)
    try:
        key = get_backend(host).fetch_host_key()
    except BackendError as exc:
        raise BackendFailure(f"could not read the host key of {host.name}: {exc}") from exc
    host.host_key_seen, host.host_key_type = key.fingerprint, key.key_type
    host.host_key_seen_at = timezone.now()
    host.save(update_fields=["host_key_seen", "host_key_type", "host_key_seen_at"])
    current().details.update({"fingerprint": key.fingerprint, "key_type": key.key_type})
    return _info(host)


@audited("host.key.confirm", "host", atomic=True)
def confirm_host_key(principal: Principal, host_id: int, fingerprint: str) -> HostKeyInfo:
    """Pin `fingerprint`, which must be the one the host last presented (fetched just before):
    an admin confirms what he has seen, never a key no one has looked at."""
    host = admin_host(principal, host_id)
    if not isinstance(fingerprint, str) or not fingerprint.startswith("SHA256:"):
        raise InvalidInput("fingerprint must be an OpenSSH SHA256 fingerprint (SHA256:...)")
    if not host.host_key_seen:
        raise Conflict(f"fetch the host key of {host.name} first, then confirm its fingerprint")
    if fingerprint.strip() != host.host_key_seen:
        raise Conflict(
            f"{host.name} last presented {host.host_key_seen}, not {fingerprint}: "
            "fetch the key again and compare"
        )
    current().details.update({"from": host.host_key_pinned, "to": host.host_key_seen})
    host.host_key_pinned = host.host_key_seen
    host.save(update_fields=["host_key_pinned"])
    reset_backends()  # connections made under the old pin must not be reused
    return _info(host)


def _info(host: Host) -> HostKeyInfo:
    return HostKeyInfo(
        host=host.name,
        key_type=host.host_key_type,
        fingerprint=host.host_key_seen,
        pinned=host.host_key_pinned,
    )
