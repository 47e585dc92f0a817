"""Helpers of the housekeeping tests (fixtures: tests/services/housekeeping/conftest.py). Not
a test module.

Every test runs as this run's own Sandhub instance (SANDHUB_INSTANCE), so reconciliation here
never touches containers of other deployments or of other test runs on the same engine.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import docker

from sandboxes.models import Sandbox
from tenants.models import AuditLog
from tenants.principal import Principal

INSTANCE = f"pytest-{uuid.uuid4().hex[:8]}"
SYSTEM = Principal.system()
LONG_AGO = timedelta(hours=5)


def age(sandbox_id: str, **fields) -> None:
    Sandbox.objects.filter(public_id=sandbox_id).update(**fields)


def status_of(sandbox_id: str) -> str:
    return Sandbox.objects.get(public_id=sandbox_id).status


def audit_of(action: str) -> AuditLog:
    return AuditLog.objects.get(action=action)


def engine_has(engine: docker.DockerClient, label_id: str) -> tuple[bool, bool]:
    """(a container, a volume) labelled with this sandbox or pool id exist."""
    selector = {"label": f"org.sandhub.sandbox={label_id}"}
    return (
        bool(engine.containers.list(all=True, filters=selector)),
        bool(engine.volumes.list(filters=selector)),
    )
