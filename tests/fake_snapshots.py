"""Snapshots for the in-memory backend (tests/fakes.py): a snapshot is a copy of a sandbox's
files, kept per host; export/import move it as a JSON stream in small chunks."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterable, Iterator
from typing import Any

from hosts.backends.base import (
    LABEL_INSTANCE,
    LABEL_SNAPSHOT,
    BackendError,
    ManagedResource,
    SnapshotTaken,
)


class FakeSnapshots:
    """Mixed into FakeBackend: `snapshots` (id -> record) is shared like its sandboxes."""

    snapshots: dict[str, dict[str, Any]] = {}
    fail_snapshot: str | None = None
    provisioned_from: list[dict[str, Any]] = []  # the snapshot states sandboxes started from
    host: Any
    sandboxes: dict[str, dict[str, Any]]

    def _box(self, state: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def snapshot(
        self, state: dict[str, Any], snapshot_id: str, labels: dict[str, str]
    ) -> SnapshotTaken:
        if self.fail_snapshot:
            raise BackendError(self.fail_snapshot)
        files = dict(self._box(state)["files"])
        return self._keep(snapshot_id, labels, files)

    def _keep(self, snapshot_id: str, labels: dict[str, str], files: dict) -> SnapshotTaken:
        self.snapshots[snapshot_id] = {
            "files": files,
            "labels": labels,
            "host": self.host.pk,
            "created": time.time(),
        }
        size = sum(len(content) for content in files.values())
        return SnapshotTaken({"snapshot_id": snapshot_id, "host": self.host.pk}, size)

    def snapshot_files(self, snapshot_state: dict[str, Any]) -> dict[str, bytes]:
        record = self.snapshots.get(snapshot_state.get("snapshot_id", ""))
        if record is None or record["host"] != self.host.pk:
            raise BackendError(f"snapshot {snapshot_state.get('snapshot_id')} is not on this host")
        return dict(record["files"])

    def delete_snapshot(self, snapshot_state: dict[str, Any]) -> None:
        self.snapshots.pop(snapshot_state.get("snapshot_id", ""), None)

    def export_snapshot(self, snapshot_state: dict[str, Any]) -> Iterator[bytes]:
        files = self.snapshot_files(snapshot_state)
        text = {name: base64.b64encode(content).decode() for name, content in files.items()}
        data = json.dumps(text).encode()
        return iter([data[i : i + 1024] for i in range(0, len(data), 1024)])

    def import_snapshot(
        self, snapshot_id: str, labels: dict[str, str], chunks: Iterable[bytes]
    ) -> SnapshotTaken:
        text = json.loads(b"".join(chunks))
        files = {name: base64.b64decode(content) for name, content in text.items()}
        return self._keep(snapshot_id, labels, files)

    def managed_snapshots(self) -> list[ManagedResource]:
        return [
            ManagedResource(
                kind="snapshot",
                label_id=record["labels"].get(LABEL_SNAPSHOT, snapshot_id),
                name=snapshot_id,
                created_at=record["created"],
                instance=record["labels"].get(LABEL_INSTANCE, ""),
                state={"snapshot_id": snapshot_id},
            )
            for snapshot_id, record in self.snapshots.items()
            if record["host"] == self.host.pk
        ]
