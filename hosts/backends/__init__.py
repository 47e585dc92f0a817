"""Backend registry: a Host's kind picks a class by dotted path from settings.SANDHUB_BACKENDS.

Instances are cached per host (endpoint + credential), so a connection to an engine or an
SSH server is reused across calls in one process.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from django.conf import settings
from django.utils.module_loading import import_string

from hosts.backends.base import BackendError, SandboxBackend

if TYPE_CHECKING:
    from hosts.models import Host

_cache: dict[tuple, SandboxBackend] = {}
_lock = threading.Lock()


def backend_class(kind: str) -> type[SandboxBackend]:
    try:
        path = settings.SANDHUB_BACKENDS[kind]
    except KeyError as exc:
        raise BackendError(f"no backend is configured for host kind {kind!r}") from exc
    return import_string(path)


def get_backend(host: Host) -> SandboxBackend:
    cls = backend_class(host.kind)
    # A replaced secret changes the credential's updated_at, so it gets a fresh connection.
    credential = host.credential if host.credential_id else None
    credential_version = credential.updated_at if credential is not None else None
    key = (cls, host.pk, host.endpoint, host.credential_id, credential_version)
    with _lock:
        backend = _cache.get(key)
        if backend is None:
            backend = _cache[key] = cls(host)
        else:
            backend.host = host  # fresh flags (draining, options) from the caller's row
        return backend


def reset_backends() -> None:
    """Forget cached instances (tests, and after a host's endpoint or credential changes)."""
    with _lock:
        for backend in _cache.values():
            backend.close()
        _cache.clear()
