"""File operations of the files section: delete, rename (move) and new folder, only inside
/workspace, never through a symbolic link.

Each one takes a path relative to /workspace or absolute under it (normalised; `..`, paths
elsewhere and /workspace itself are refused), is authorized for writing (members and up: a
viewer or a read-only key is refused) and writes one audit row.

How they act, and why that is safe on a shared SSH host: rename and new folder run as the
sandbox user through backend.exec, with the paths as argv (never spliced into the script), so
they have exactly the rights a command of the sandbox has: the kernel refuses what that user
may not touch (another sandbox's files, the host's), whatever the paths say. On top of that
the script walks each path from /workspace one folder at a time and refuses a symbolic link
on the way, so a link like /workspace/out -> /etc never takes the operation outside; the
last component itself is acted on as an entry (`mv -T` moves a link, not what it points to).
Delete goes through backend.delete_entries, which removes without following links and never
under a parent that resolves outside /workspace; the same walk first tells a missing path or
a link on the way from a deleted one.
"""

from __future__ import annotations

import posixpath

from sandboxes.contract.errors import (
    BackendFailure,
    Conflict,
    InvalidInput,
    NotFound,
    ServiceError,
)
from sandboxes.contract.file_ops import FileChange
from sandboxes.models import Sandbox
from sandboxes.policy import validation
from sandboxes.policy.access import WRITE
from sandboxes.services.common import (
    backend_errors,
    backend_of,
    decode_output,
    running_sandbox,
    touch,
)
from tenants.auditing import audited, current
from tenants.principal import Principal

WORKSPACE = validation.WORKSPACE

# sh -c FILE_OP sandhub-fileop OP REL [REL2]: REL relative to /workspace, normalised, no `..`.
# Exit codes: 44 missing, 45 exists, 46 not a folder, 47 a symbolic link on the way, 13
# permission denied; the message on stderr names the path.
MISSING, EXISTS, NOT_A_FOLDER, THROUGH_LINK, DENIED = 44, 45, 46, 47, 13
FILE_OP = r"""
walk() {  # cd to the folder holding $1 without following a link; base: its last part
    cd -- /workspace || exit 13
    rest=$1 done=/workspace
    while case $rest in */*) true;; *) false;; esac; do
        part=${rest%%/*} rest=${rest#*/}
        if [ -L "$part" ]; then
            echo "$done/$part is a symbolic link: file operations stay inside /workspace" >&2
            exit 47
        fi
        if [ ! -e "$part" ]; then
            if [ "$2" = make ]; then mkdir -- "$part" || exit 13
            else echo "no folder $done/$part" >&2; exit 44; fi
        fi
        [ -d "$part" ] || { echo "$done/$part is a file, not a folder" >&2; exit 46; }
        cd -- "$part" || exit 13
        done=$done/$part
    done
    base=$rest
}
exists() { [ -e "$1" ] || [ -L "$1" ]; }
op=$1; shift
case $op in
probe)
    walk "$1"
    exists "$base" || { echo "/workspace/$1 not found" >&2; exit 44; }
    ;;
mkdir)
    walk "$1" make
    exists "$base" && { echo "/workspace/$1 already exists" >&2; exit 45; }
    mkdir -- "$base" || exit 1
    ;;
rename)
    walk "$1"
    exists "$base" || { echo "/workspace/$1 not found" >&2; exit 44; }
    source=$PWD/$base
    walk "$2"
    exists "$base" && { echo "/workspace/$2 already exists" >&2; exit 45; }
    mv -T -n -- "$source" "$PWD/$base" || exit 1
    ;;
esac
"""
_ERRORS: dict[int, type[ServiceError]] = {
    MISSING: NotFound,
    EXISTS: Conflict,
    NOT_A_FOLDER: InvalidInput,
    THROUGH_LINK: InvalidInput,
}


def inside_workspace(path: object, what: str = "path") -> str:
    """The absolute, normalised path of `path` inside /workspace (not /workspace itself)."""
    if isinstance(path, str) and ".." in path.split("/"):
        raise InvalidInput(f"{what} may not contain '..'; got {path!r}")
    full = validation.path(path, what, under_workspace=True)
    if full == WORKSPACE:
        raise InvalidInput(f"{what} must name something inside {WORKSPACE}, not the folder itself")
    return full


def _relative(full: str) -> str:
    return posixpath.relpath(full, WORKSPACE)


def _run(sandbox: Sandbox, doing: str, *args: str) -> None:
    """Run FILE_OP as the sandbox user; its refusals as service errors."""
    argv = ["sh", "-c", FILE_OP, "sandhub-fileop", *args]
    with backend_errors(sandbox, doing):
        result = backend_of(sandbox).exec(
            sandbox.backend_state, argv, cwd="/", env={}, timeout=60, output_cap=64 * 1024
        )
    if result.exit_code == 0:
        return
    said = decode_output(result.stderr).strip().splitlines()
    reason = said[-1] if said else f"exit {result.exit_code}"
    if result.exit_code in _ERRORS:
        raise _ERRORS[result.exit_code](reason)
    if result.exit_code == DENIED or "Permission denied" in reason:
        raise InvalidInput(f"cannot {doing}: permission denied (the sandbox user may not)")
    if result.exit_code == 1:
        raise InvalidInput(f"cannot {doing}: {reason}")
    raise BackendFailure(f"could not {doing} in sandbox {sandbox.public_id}: {reason}")


def _changed(sandbox: Sandbox, action: str, path: str, to: str | None = None) -> FileChange:
    touch(sandbox)
    return FileChange(
        sandbox_id=sandbox.public_id,
        action=action,
        path=path,
        to=to,
        resumed_seconds=sandbox.resumed_seconds,
    )


@audited("files.delete", "sandbox")
def delete_path(principal: Principal, sandbox_id: str, path: str) -> FileChange:
    """Remove a file, a link (not what it points to) or a folder with what it holds."""
    current().target("sandbox", sandbox_id)
    full = inside_workspace(path)
    sandbox = running_sandbox(principal, sandbox_id, WRITE, "delete files")
    current().details["path"] = full
    _run(sandbox, f"delete {full}", "probe", _relative(full))
    with backend_errors(sandbox, f"delete {full}"):
        removed = backend_of(sandbox).delete_entries(
            sandbox.backend_state, WORKSPACE, [_relative(full)]
        )
    if not removed:  # gone between the look and the removal
        raise NotFound(f"{full} not found in sandbox {sandbox_id}")
    return _changed(sandbox, "delete", full)


@audited("files.rename", "sandbox")
def rename_path(principal: Principal, sandbox_id: str, path: str, to: str) -> FileChange:
    """Rename or move a file or folder to `to` (a path, not a folder to move into): an
    existing destination is refused, never replaced."""
    current().target("sandbox", sandbox_id)
    source = inside_workspace(path)
    destination = inside_workspace(to, "destination")
    if destination == source:
        raise InvalidInput(f"{source} is already called that")
    if destination.startswith(source + "/"):
        raise InvalidInput(f"cannot move {source} into itself ({destination})")
    sandbox = running_sandbox(principal, sandbox_id, WRITE, "rename files")
    current().details.update({"path": source, "to": destination})
    _run(
        sandbox,
        f"rename {source} to {destination}",
        "rename",
        _relative(source),
        _relative(destination),
    )
    return _changed(sandbox, "rename", source, destination)


@audited("files.mkdir", "sandbox")
def make_directory(principal: Principal, sandbox_id: str, path: str) -> FileChange:
    """A new folder (with the folders on its way that are missing); an existing one is
    refused."""
    current().target("sandbox", sandbox_id)
    full = inside_workspace(path)
    sandbox = running_sandbox(principal, sandbox_id, WRITE, "create folders")
    current().details["path"] = full
    _run(sandbox, f"create folder {full}", "mkdir", _relative(full))
    return _changed(sandbox, "mkdir", full)
