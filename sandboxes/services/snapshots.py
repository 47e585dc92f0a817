"""Snapshots: take one of a running sandbox under a name, list, show and delete them, and fork
a sandbox (a snapshot, then a sandbox from it). A sandbox starts from one with
create_sandbox(snapshot=...) (snapshot_restore.py).

What a snapshot holds, and how consistent it is, is the backend's (hosts/backends/docker/
snapshots.py, hosts/backends/ssh/snapshots.py): the workspace (and on Docker the home), copied
with the sandbox's processes frozen where the host can freeze them; a command running
meanwhile stops for the copy and goes on afterwards.

Quotas (Team.max_snapshots, Team.max_snapshot_mb): checked before anything is written (the
count, and that the team's snapshots leave room), and again once the snapshot's real size is
known, under the team's lock; over it, the snapshot's bytes and row are removed and the call
says so: nothing of it is left. Names are unique among a team's snapshots not deleted.
"""

from __future__ import annotations

from datetime import timedelta

from django.db import IntegrityError, transaction
from django.db.models import Sum
from django.utils import timezone

from hosts.backends import get_backend
from hosts.backends.base import CONSUMED_BY_ONE, LABEL_SNAPSHOT, BackendError, SandboxBackend
from sandboxes.contract.errors import BackendFailure, Conflict, InvalidInput, QuotaExceeded
from sandboxes.contract.results import SandboxInfo
from sandboxes.contract.snapshots import SnapshotInfo
from sandboxes.housekeeping.config import instance_labels
from sandboxes.models import Sandbox, SandboxStatus, Snapshot, SnapshotStatus
from sandboxes.policy import access, validation
from sandboxes.policy.access import READ, WRITE
from sandboxes.services.common import backend_errors, backend_of, running_sandbox
from sandboxes.services.sandboxes import create_sandbox
from sandboxes.services.snapshot_restore import find_snapshot
from tenants.auditing import AUDIT_VIEW, audited, change, current
from tenants.models import Team
from tenants.principal import Principal

MIB = 1024 * 1024
# A snapshot still "creating" after this long belongs to a call that died: it may be deleted.
STALE_CREATING = timedelta(minutes=30)


@audited("snapshot.create", "snapshot")
def snapshot_sandbox(
    principal: Principal, sandbox_id: str, name: str, *, counted: bool = True
) -> SnapshotInfo:
    """Keep the sandbox's files under `name` (unique in the team). The sandbox runs on; a
    command running meanwhile is frozen for the copy where the host freezes (Docker's pause,
    an isolated SSH sandbox's cgroup) and goes on afterwards. counted=False: a fork's own
    snapshot, deleted by the fork's end, outside the team's snapshot quotas."""
    snapshot_name = validation.name(name)
    if not snapshot_name:
        raise InvalidInput("a snapshot needs a name")
    sandbox = running_sandbox(principal, sandbox_id, WRITE, "take snapshots")
    current().details["sandbox"] = sandbox.public_id
    snapshot = _reserve(principal, sandbox, snapshot_name, counted)
    current().target("snapshot", snapshot.public_id)
    backend = backend_of(sandbox)
    labels = {**instance_labels(), LABEL_SNAPSHOT: snapshot.public_id}
    labels["org.sandhub.team"] = sandbox.team.slug
    try:
        with backend_errors(sandbox, "take a snapshot"):
            taken = backend.snapshot(sandbox.backend_state, snapshot.public_id, labels)
    except BaseException:
        snapshot.delete()  # the backend left nothing of it either
        raise
    current().details.update({"name": snapshot_name, "size_bytes": taken.size_bytes})
    try:
        with change():  # ready, and its audit row, in one transaction: or neither
            _settle(snapshot, taken.state, taken.size_bytes, counted)
    except QuotaExceeded:
        _discard(backend, snapshot, taken.state)
        raise
    return SnapshotInfo.from_model(snapshot)


def _reserve(principal: Principal, sandbox: Sandbox, name: str, counted: bool) -> Snapshot:
    """The snapshot's row (creating), if the team's quotas leave room (when counted) and the
    name is free; under the team's lock, so concurrent snapshots cannot all pass the check."""
    with transaction.atomic():
        team = Team.objects.select_for_update().get(pk=sandbox.team_id)
        live = Snapshot.objects.live().filter(team=team)
        if counted:
            _check_room(team, live)
        if live.filter(name=name).exists():
            raise Conflict(f"the team already has a snapshot named {name!r}")
        # Under the team's lock, as a pause or stop claims (transitions.claim): a snapshot is
        # never taken of a sandbox being paused or stopped, nor one paused while it is taken.
        if not Sandbox.objects.filter(pk=sandbox.pk, status=SandboxStatus.RUNNING).exists():
            raise Conflict(
                f"sandbox {sandbox.public_id} changed meanwhile (being paused, stopped or "
                "deleted); try again"
            )
        assert sandbox.host is not None, "a running sandbox has a host"
        try:
            with transaction.atomic():
                return Snapshot.objects.create(
                    team=team,
                    name=name,
                    source=sandbox,
                    host_kind=sandbox.host.kind,
                    host=sandbox.host,
                    created_by=principal.user,
                    image=sandbox.image,
                    cpus=sandbox.cpus,
                    memory_mb=sandbox.memory_mb,
                    disk_mb=sandbox.disk_mb,
                    network=sandbox.network,
                    egress_mode=sandbox.egress_mode,
                    egress_allow=sandbox.egress_allow,
                )
        except IntegrityError as exc:  # a concurrent one took the name first
            raise Conflict(f"the team already has a snapshot named {name!r}") from exc


def _check_room(team: Team, live) -> None:
    """QuotaExceeded unless the team's snapshots leave room for one more."""
    count = live.count()
    if count >= team.max_snapshots:
        raise QuotaExceeded(
            f"team quota: at most {team.max_snapshots} snapshots ({count} kept); delete one first"
        )
    used = _bytes(live)
    if used >= team.max_snapshot_mb * MIB:
        raise QuotaExceeded(
            f"team quota: snapshots may take {team.max_snapshot_mb} MB together, and "
            f"{_mb(used)} MB are taken; delete one first"
        )


def _settle(snapshot: Snapshot, state: dict, size_bytes: int, counted: bool) -> None:
    """Ready with its real size, or QuotaExceeded (nothing changed) if that is over."""
    team = Team.objects.select_for_update().get(pk=snapshot.team_id)
    others = _bytes(Snapshot.objects.live().filter(team=team).exclude(pk=snapshot.pk))
    if counted and others + size_bytes > team.max_snapshot_mb * MIB:
        raise QuotaExceeded(
            f"team quota: snapshots may take {team.max_snapshot_mb} MB together; this one "
            f"takes {_mb(size_bytes)} MB and the others {_mb(others)} MB, so it was not kept"
        )
    snapshot.backend_state = state
    snapshot.size_bytes = size_bytes
    snapshot.status = SnapshotStatus.READY
    snapshot.save(update_fields=["backend_state", "size_bytes", "status"])


def _discard(backend: SandboxBackend, snapshot: Snapshot, state: dict) -> None:
    """A snapshot over the quota: its bytes, then its row (if its bytes cannot be removed,
    the row stays, in error, for a later delete and for reconciliation to keep)."""
    try:
        backend.delete_snapshot(state)
    except BackendError as exc:
        snapshot.backend_state = state
        snapshot.status = SnapshotStatus.ERROR
        snapshot.status_message = f"over the team's quota, and removing it failed: {exc}"
        snapshot.save(update_fields=["backend_state", "status", "status_message"])
        return
    snapshot.delete()


def _bytes(snapshots) -> int:
    return int(snapshots.aggregate(total=Sum("size_bytes"))["total"] or 0)


def _mb(size: int) -> str:
    return f"{size / MIB:.1f}".removesuffix(".0")


@audited("snapshot.list", "snapshot", kind=AUDIT_VIEW)
def list_snapshots(principal: Principal) -> list[SnapshotInfo]:
    """The team's snapshots (not deleted ones), newest first."""
    access.require(principal, READ, "list snapshots")
    if principal.team is None:
        return []
    found = (
        Snapshot.objects.live()
        .filter(team=principal.team)
        .select_related("team", "source", "host", "image", "created_by")
    )
    return [SnapshotInfo.from_model(s) for s in found]


@audited("snapshot.get", "snapshot", kind=AUDIT_VIEW)
def get_snapshot(principal: Principal, snapshot_id: str) -> SnapshotInfo:
    current().target("snapshot", snapshot_id)
    return SnapshotInfo.from_model(find_snapshot(principal, snapshot_id, READ, "see snapshots"))


@audited("snapshot.delete", "snapshot")
def delete_snapshot(principal: Principal, snapshot_id: str) -> SnapshotInfo:
    """Remove the snapshot's bytes from its host; the row stays as history (its name is
    free again). Sandboxes made from it are not touched: they have copies."""
    current().target("snapshot", snapshot_id)
    snapshot = find_snapshot(principal, snapshot_id, WRITE, "delete snapshots")
    _claim_for_deletion(snapshot)
    try:
        if snapshot.backend_state:
            get_backend(snapshot.host).delete_snapshot(snapshot.backend_state)
    except BackendError as exc:
        Snapshot.objects.filter(pk=snapshot.pk).update(
            status=SnapshotStatus.ERROR, status_message=f"delete failed: {exc}"
        )
        raise BackendFailure(f"could not delete snapshot {snapshot_id}: {exc}") from exc
    with change():
        snapshot.status = SnapshotStatus.DELETED
        snapshot.status_message = ""
        snapshot.deleted_at = timezone.now()
        snapshot.save(update_fields=["status", "status_message", "deleted_at"])
    return SnapshotInfo.from_model(snapshot)


def _claim_for_deletion(snapshot: Snapshot) -> None:
    """deleting, if no other call is taking or deleting it (compare-and-set)."""
    deletable = [SnapshotStatus.READY, SnapshotStatus.ERROR]
    stale = snapshot.status == SnapshotStatus.CREATING and (
        timezone.now() - snapshot.created_at > STALE_CREATING
    )
    if snapshot.status not in deletable and not stale:
        raise Conflict(f"snapshot {snapshot.public_id} is {snapshot.status}: try again later")
    won = Snapshot.objects.filter(pk=snapshot.pk, status=snapshot.status).update(
        status=SnapshotStatus.DELETING
    )
    if not won:
        raise Conflict(f"snapshot {snapshot.public_id} is being changed: try again later")
    snapshot.status = SnapshotStatus.DELETING


def fork_sandbox(
    principal: Principal,
    sandbox_id: str,
    *,
    name: str | None = None,
    snapshot_name: str = "",
    keep_snapshot: bool = False,
) -> tuple[SnapshotInfo | None, SandboxInfo]:
    """A new sandbox with the sandbox's files: a snapshot of it, then a sandbox from that.

    keep_snapshot: the snapshot stays (listed, counted in the team's quotas) until deleted,
    named snapshot_name (default "fork of <sandbox> <time>"), and is returned. Otherwise it is
    the fork's alone: outside the quotas, its files moved into the new sandbox where the host
    can (a Docker disk image renamed into the new disk: one copy of the bytes, not two), and
    deleted once the new sandbox runs or failed to (its audit rows stay); None is returned.
    """
    if not snapshot_name or not keep_snapshot:
        stamp = timezone.now().strftime("%Y-%m-%d %H:%M:%S.%f")
        snapshot_name = f"fork of {sandbox_id} {stamp}"
    snapshot = snapshot_sandbox(principal, sandbox_id, snapshot_name, counted=keep_snapshot)
    if keep_snapshot:
        return snapshot, create_sandbox(principal, name=name, snapshot=snapshot.id)
    row = Snapshot.objects.filter(public_id=snapshot.id)
    row.update(backend_state={**row.get().backend_state, CONSUMED_BY_ONE: True})
    try:
        return None, create_sandbox(principal, name=name, snapshot=snapshot.id)
    finally:
        delete_snapshot(principal, snapshot.id)
