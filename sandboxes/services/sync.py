"""Sync of a directory tree with a local one (the `sandhub` client): manifest, upload of a tar,
deletion of entries, download of chosen entries as one tar.

A sync root is a directory under /workspace, reached without following a symbolic link (the
backends refuse a link at the root or on the way to it, so /workspace/out -> /etc is never
listed, emptied or read); every entry is named relative to it (POSIX, never `..`), and
nothing a sync does reaches outside it: names are checked here, the backends resolve
parents and never follow links. Every call acts as the sandbox user and
leaves one audit row with counts (files sent, entries deleted), so a client's "only three
files were sent" is on record. Transfers stream: an upload is spooled (memory, then disk)
within SANDHUB_MAX_TRANSFER_BYTES, a download is re-tarred member by member as it comes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import IO, cast

from django.conf import settings

from sandboxes.contract.errors import InvalidInput
from sandboxes.contract.results import FileStream
from sandboxes.contract.sync import Manifest, ManifestEntry, SyncDelete, SyncUpload
from sandboxes.models import Sandbox
from sandboxes.policy import validation
from sandboxes.policy.access import READ, WRITE
from sandboxes.services.common import (
    backend_errors,
    backend_of,
    running_sandbox,
    started_stream,
    touch,
)
from sandboxes.services.synctar import relative_names, retar, scan_upload, spool
from tenants.auditing import AUDIT_READ, AUDIT_VIEW, audited, current
from tenants.principal import Principal

MANIFEST_DEFAULT = 1000
MANIFEST_MAX = 5000
MAX_PATHS = 10_000  # names per delete or download request


def _root(path: object) -> str:
    return validation.path(path, "path", under_workspace=True)


@contextlib.contextmanager
def _refusals(sandbox: Sandbox, root: str, doing: str) -> Iterator[None]:
    """What the sandbox user may not do, or a root that is no directory: the caller's error."""
    try:
        with backend_errors(sandbox, f"{doing} {root}"):
            yield
    except PermissionError as exc:
        raise InvalidInput(
            f"cannot {doing} {root}: permission denied for the sandbox user ({exc})"
        ) from exc
    except NotADirectoryError as exc:
        if "symbolic link" in str(exc):  # the root, or a directory on the way to it
            raise InvalidInput(
                f"cannot {doing} {root}: {exc} (name the directory the link points to, "
                "if it is inside /workspace)"
            ) from exc
        raise InvalidInput(f"{root} is not a directory: {exc}") from exc
    except FileExistsError as exc:
        raise InvalidInput(f"cannot {doing} {root}: {exc}") from exc


@audited("files.manifest", "sandbox", kind=AUDIT_VIEW)
def tree_manifest(
    principal: Principal,
    sandbox_id: str,
    path: str,
    *,
    after: str | None = None,
    limit: int = MANIFEST_DEFAULT,
) -> Manifest:
    """A page of the files, directories and links under `path` (recursive, links not
    followed), sorted by relative path, after the cursor `after`; `next` names the next
    page's cursor. A missing root answers exists=False (a first sync); a file is refused."""
    current().target("sandbox", sandbox_id)
    root = _root(path)
    validation.positive_int(limit, "limit", minimum=1, maximum=MANIFEST_MAX)
    if after is not None and (not isinstance(after, str) or len(after) > 4096):
        raise InvalidInput("after must be a path of at most 4096 characters")
    sandbox = running_sandbox(principal, sandbox_id, READ, "list files")
    current().details.update({"path": root, "after": after, "limit": limit})
    with _refusals(sandbox, root, "list"):
        page = backend_of(sandbox).manifest(
            sandbox.backend_state, root, after=after or None, limit=limit
        )
    current().details["entries"] = len(page.entries)
    return Manifest(
        path=root,
        exists=page.exists,
        entries=[ManifestEntry.model_validate(e, from_attributes=True) for e in page.entries],
        next=page.next,
    )


@audited("files.sync.upload", "sandbox")
def sync_upload(
    principal: Principal, sandbox_id: str, path: str, tar_stream: IO[bytes]
) -> SyncUpload:
    """Write exactly the tar's members under `path` (made with its parents if missing),
    keeping each one's mode and mtime: regular files, directories and symbolic links only,
    never through a link. The stream is read in chunks, at most SANDHUB_MAX_TRANSFER_BYTES."""
    current().target("sandbox", sandbox_id)
    root = _root(path)
    if not hasattr(tar_stream, "read"):
        raise InvalidInput("the upload must be a readable tar stream")
    sandbox = running_sandbox(principal, sandbox_id, WRITE, "write files")
    current().details["path"] = root
    with spool(tar_stream, settings.SANDHUB_MAX_TRANSFER_BYTES) as archive:
        scan = scan_upload(archive)
        current().details.update(
            {"files": scan.files, "bytes": scan.bytes, "paths": scan.paths[:50]}
        )
        with _refusals(sandbox, root, "write"):
            # The archive with the plan made while scanning: the backend reads no header again.
            planned = cast(IO[bytes], scan.planned)
            backend_of(sandbox).put_files(sandbox.backend_state, root, planned)
    touch(sandbox)
    return SyncUpload(path=root, files=scan.files, bytes=scan.bytes)


@audited("files.sync.delete", "sandbox")
def sync_delete(principal: Principal, sandbox_id: str, path: str, paths: list[str]) -> SyncDelete:
    """Remove the entries `paths` (relative to `path`): files, links (not what they point
    to), directories with what they hold; never anything outside the root."""
    current().target("sandbox", sandbox_id)
    root = _root(path)
    names = relative_names(paths, minimum=0, maximum=MAX_PATHS)
    sandbox = running_sandbox(principal, sandbox_id, WRITE, "delete files")
    current().details.update({"path": root, "paths": names[:50], "requested": len(names)})
    with _refusals(sandbox, root, "delete under"):
        deleted = backend_of(sandbox).delete_entries(sandbox.backend_state, root, names)
    current().details["deleted"] = deleted
    touch(sandbox)
    return SyncDelete(path=root, deleted=deleted)


@audited("files.sync.download", "sandbox", kind=AUDIT_READ)
def open_sync_download(
    principal: Principal, sandbox_id: str, path: str, paths: list[str]
) -> FileStream:
    """A tar of exactly the entries `paths` under `path` (named by those relative paths,
    modes and nanosecond mtimes kept; a directory without its content), as chunks, at most
    SANDHUB_MAX_TRANSFER_BYTES of content. close() it when done with it."""
    current().target("sandbox", sandbox_id)
    root = _root(path)
    names = relative_names(paths, minimum=1, maximum=MAX_PATHS)
    sandbox = running_sandbox(principal, sandbox_id, READ, "read files")
    current().details.update({"path": root, "files": len(names), "paths": names[:50]})
    limit = settings.SANDHUB_MAX_TRANSFER_BYTES
    with _refusals(sandbox, root, "read"), backend_errors(sandbox, f"read {root}", missing=root):
        stream = backend_of(sandbox).get_entries(sandbox.backend_state, root, names)
        return started_stream(retar(stream, set(names), limit), stream)
