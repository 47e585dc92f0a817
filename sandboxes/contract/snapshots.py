"""The result of snapshots (sandboxes/services/snapshots.py): a snapshot as every interface
shows it."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from pydantic import Field

from sandboxes.contract.results import Result

if TYPE_CHECKING:
    from sandboxes.models import Snapshot

SNAPSHOT_ID = (
    "the snapshot's id, like snap_k3j9x0a2b4c6: create_sandbox takes it as snapshot_id, "
    "delete_snapshot to remove it"
)


class SnapshotInfo(Result):
    """A sandbox's files kept under a name: new sandboxes start from it with its files,
    image and limits."""

    id: str = Field(description=SNAPSHOT_ID)
    name: str
    team: str
    status: str = Field(description="creating, ready, error, deleting or deleted")
    status_message: str
    sandbox_id: str | None = Field(description="the sandbox it was taken from")
    host: str = Field(description="the host its files are on")
    host_kind: str = Field(description="new sandboxes from it run on a host of this kind")
    size_bytes: int = Field(description="what it takes on its host's disk (team quota)")
    image: str
    cpus: float
    memory_mb: int
    disk_mb: int | None = Field(description="size of /workspace of sandboxes made from it")
    network: bool
    created_by: str | None
    created_at: datetime
    deleted_at: datetime | None

    @classmethod
    def from_model(cls, snapshot: Snapshot) -> SnapshotInfo:
        return cls.read(
            snapshot,
            id=snapshot.public_id,
            team=snapshot.team.slug,
            sandbox_id=snapshot.source.public_id if snapshot.source else None,
            host=snapshot.host.name,
            image=snapshot.image.name,
            created_by=snapshot.created_by.get_username() if snapshot.created_by else None,
        )


__all__ = ["SNAPSHOT_ID", "SnapshotInfo"]
