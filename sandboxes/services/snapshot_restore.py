"""Starting a sandbox from a snapshot (create_sandbox(snapshot=...)): finding the principal's
snapshot, what the new sandbox inherits from it, and its provisioning, on the snapshot's own
host or, moved there as a tar stream, on another host of the kind.

A snapshot's bytes stay on the host that took it. Placement prefers that host (nothing to
move); when it has no room, the sandbox goes to another host of the kind, and the snapshot
is streamed there first (export_snapshot there, import_snapshot here: a chunk at a time, the
platform in between holds no more than that) as a copy of its own, labelled with an id no
row has: used for this one sandbox, then removed; left behind (a process killed meanwhile),
it is an orphan that reconciliation removes.
"""

from __future__ import annotations

import contextlib
from dataclasses import replace
from typing import Any

from hosts.backends import get_backend
from hosts.backends.base import LABEL_SNAPSHOT, BackendError, SandboxBackend, SandboxSpec
from sandboxes.contract.errors import Conflict, InvalidInput, NotFound
from sandboxes.housekeeping.config import instance_labels
from sandboxes.models import Sandbox, Snapshot, SnapshotStatus, new_snapshot_id
from sandboxes.policy import access
from sandboxes.policy.validation import SNAPSHOT_ID_RE
from tenants.auditing import current
from tenants.principal import Principal


def check_snapshot_id(value: Any) -> str:
    if not isinstance(value, str) or not SNAPSHOT_ID_RE.match(value):
        raise InvalidInput(
            f"malformed snapshot id {str(value)[:40]!r}: ids look like snap_ followed by "
            "lowercase letters and digits"
        )
    return value


def find_snapshot(principal: Principal, snapshot_id: Any, need: str, doing: str) -> Snapshot:
    """The principal's team's snapshot (not deleted), authorized for `need`; another team's
    answers exactly like one that does not exist."""
    check_snapshot_id(snapshot_id)
    role = access.role_of(principal)
    found = None
    if role is not None and principal.team is not None:
        found = (
            Snapshot.objects.live()
            .select_related("team", "source", "host", "image", "created_by")
            .filter(team=principal.team, public_id=snapshot_id)
            .order_by()
            .first()
        )
    if found is None:
        raise NotFound(f"snapshot {snapshot_id} not found")
    access.require(principal, need, doing)
    return found


def ready_snapshot(principal: Principal, snapshot_id: Any) -> Snapshot:
    """The snapshot a new sandbox starts from: the principal's, and ready."""
    snapshot = find_snapshot(principal, snapshot_id, access.WRITE, "create sandboxes")
    if snapshot.status != SnapshotStatus.READY:
        raise Conflict(f"snapshot {snapshot.public_id} is {snapshot.status}, not ready")
    current().details["snapshot"] = snapshot.public_id
    return snapshot


def inherited(snapshot: Snapshot, asked: dict[str, Any]) -> dict[str, Any]:
    """What the new sandbox asked for, the snapshot's image and limits where it did not.
    A snapshot that holds a disk fixes the size of the new sandbox's."""
    disk_mb = snapshot.backend_state.get("disk_mb")  # a disk image's: the new disk's too
    if asked.get("disk_mb") is not None and disk_mb and asked["disk_mb"] != disk_mb:
        raise InvalidInput(
            f"a sandbox from snapshot {snapshot.public_id} has its disk of {disk_mb} MB "
            "(disk_mb must be that, or left out)"
        )
    defaults = {
        "image": snapshot.image.name,
        "cpus": snapshot.cpus,
        "memory_mb": snapshot.memory_mb,
        "network": snapshot.egress_mode or snapshot.network,
        "disk_mb": disk_mb or snapshot.disk_mb,
        # Its allow-list goes with its mode: a sandbox asking another mode asks afresh.
        "allow": (snapshot.egress_allow or None) if asked.get("network") is None else None,
    }
    return {key: defaults[key] if asked.get(key) is None else asked[key] for key in defaults}


def provision(sandbox: Sandbox, spec: SandboxSpec, snapshot: Snapshot) -> dict[str, Any]:
    """The new sandbox's backend state: started from the snapshot's files (no warm-pool
    member: its workspace is empty)."""
    assert sandbox.host is not None, "placement gives every new sandbox a host"
    spec = replace(spec, labels={**spec.labels, **instance_labels()})
    target = get_backend(sandbox.host)
    if snapshot.host_id == sandbox.host_id:
        return target.provision(replace(spec, snapshot=snapshot.backend_state))
    current().details["moved_from"] = snapshot.host.name
    copy = _moved_here(snapshot, target)
    try:
        return target.provision(replace(spec, snapshot=copy))
    finally:
        with contextlib.suppress(BackendError):
            target.delete_snapshot(copy)


def _moved_here(snapshot: Snapshot, target: SandboxBackend) -> dict[str, Any]:
    """A copy of the snapshot on the target's host, streamed from the snapshot's own."""
    copy_id = new_snapshot_id()
    labels = {**instance_labels(), LABEL_SNAPSHOT: copy_id, "org.sandhub.team": snapshot.team.slug}
    stream = get_backend(snapshot.host).export_snapshot(snapshot.backend_state)
    try:
        return target.import_snapshot(copy_id, labels, stream).state
    finally:
        close = getattr(stream, "close", None)
        if close is not None:
            close()
