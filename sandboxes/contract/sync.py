"""What the sync services return (sandboxes/services/sync.py): a tree's manifest, and the
counts of an upload or a removal. Kept apart from results.py, which holds the rest."""

from __future__ import annotations

from typing import Literal

from sandboxes.contract.results import Result


class ManifestEntry(Result):
    """One entry of a tree manifest (sync): path relative to the root (POSIX, never ..),
    size 0 for directories, mtime in seconds, mode the 0o7777 bits, target for links."""

    path: str
    kind: Literal["file", "dir", "link"]
    size: int
    mtime: float
    mode: int
    target: str = ""


class Manifest(Result):
    """A page of a tree's entries sorted by path (bytewise) after a cursor; `next` is the
    next page's cursor (null at the end); exists false: the root is missing."""

    path: str
    exists: bool
    entries: list[ManifestEntry]
    next: str | None


class SyncUpload(Result):
    path: str
    files: int
    bytes: int


class SyncDelete(Result):
    path: str
    deleted: int
