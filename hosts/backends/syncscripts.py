"""Sync of a tree (any backend kind): the manifest, deletions and a tar of chosen entries.

The agent does the manifest and deletions in one request each (agent/inside/sync.py). Where
it cannot run (no python3, or the agent turned off), the same answers come from the scripts
here, run as the sandbox user through the backend's own exec:

- MANIFEST: one GNU `find -printf`, NUL-separated fields (any byte may be in a name), sorted
  and cut to the page here (`parse_manifest`);
- REMOVE: names come NUL-separated on stdin and reach the shell only as arguments (xargs -0),
  never as code; each one's parent is resolved (`cd -P`) and must lie inside the root, so a
  link never leads a deletion outside it. Batched to fit the exec's stdin limits;
- TAR_LIST (every path, agent or not): `tar --null -T -` of exactly the listed entries, pax
  format (nanosecond mtimes), no recursion, hard links stored as files.

Each reaches its root without following a symbolic link (ROOT_CHECK): from /workspace down,
no directory on the way may be a link, and the directory entered must be the one checked
(its physical path), so /workspace/out -> /etc given as a root is refused by name instead of
being listed, emptied or read. The agent does the same (agent/inside/sync.py).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

from hosts.backends.base import BackendError, ExecResult, ManifestEntry, ManifestPage

WORKSPACE = "/workspace"
MISSING_EXIT = 44  # the root is not there
NOT_A_DIRECTORY_EXIT = 45  # the root is a file or a link, or a link is on the way to it
DENIED_EXIT = 13
LISTING_CAP = 64 * 1024 * 1024  # a plain-path manifest's find output (about 600k entries)
STDIN_BATCH = 60 * 1024  # bytes of names per REMOVE exec (Docker's per-command limit: 64 KiB)
TIMEOUT = 120.0

# Runs a backend exec: (argv, stdin, output cap) -> its result.
Run = Callable[[list[str], bytes | None, int], ExecResult]

# Defines `enter ROOT TOP`: cd into ROOT (under TOP, /workspace as the script sees it). A
# symbolic link at TOP or on the way down from it, a file on the way, or a directory entered
# that is not the one checked (a link swapped in meanwhile) exit 45 with the reason, naming
# /workspace paths; it returns 44 when ROOT is not there, 13 when it cannot be entered.
ROOT_CHECK = r"""
refuse() { echo "/workspace${1#"$2"} $3" >&2; exit 45; }
enter() {
    case $1 in "$2"|"$2"/*) ;; *) echo "$1 is not under $2" >&2; exit 45;; esac
    link="is a symbolic link: a sync root is never reached through one"
    [ -L "$2" ] && refuse "$2" "$2" "$link"
    p=$2
    set -f; IFS=/
    for part in ${1#"$2"}; do
        [ -n "$part" ] || continue
        p=$p/$part
        [ -L "$p" ] && refuse "$p" "$2" "$link"
        if [ -e "$p" ] && [ ! -d "$p" ]; then refuse "$p" "$2" "is not a directory"; fi
    done
    set +f; unset IFS
    [ -e "$1" ] || return 44
    top=$(cd -P -- "$2" 2>/dev/null && pwd) && cd -P -- "$1" 2>/dev/null || return 13
    [ "$PWD" = "$top${1#"$2"}" ] || refuse "$1" "$2" "changed while it was entered"
}
"""

# sh -c MANIFEST sandhub-manifest ROOT TOP
MANIFEST = (
    ROOT_CHECK
    + r"""
enter "$1" "$2" || exit $?
exec find . -mindepth 1 \( -type f -o -type d -o -type l \) \
    -printf '%y\0%s\0%T@\0%m\0%l\0%P\0'
"""
)
_FIELDS = 6
_KINDS = {b"f": "file", b"d": "dir", b"l": "link"}

# sh -c REMOVE sandhub-rm ROOT TOP, relative names NUL-separated on stdin. Prints on stderr one
# "sandhub-removed N" per batch of xargs (N: the names that existed and were handed to rm).
REMOVE = (
    ROOT_CHECK
    + r"""
enter "$1" "$2"; code=$?
[ "$code" = 44 ] && exit 0
[ "$code" = 0 ] || exit "$code"
SANDHUB_ROOT=$PWD; export SANDHUB_ROOT
xargs -0 -r sh -c '
n=0
for p in "$@"; do
    case /$p/ in */../*|*/./*|*//*) continue;; esac
    case $p in /*|"") continue;; esac
    case $p in */*) parent=${p%/*} base=${p##*/};; *) parent=. base=$p;; esac
    cd -P -- "$SANDHUB_ROOT/$parent" 2>/dev/null || continue
    case $PWD/ in "$SANDHUB_ROOT"/*) ;; *) continue;; esac
    [ -e "$base" ] || [ -L "$base" ] || continue
    printf "%s\0" "$PWD/$base"
    n=$((n + 1))
done
echo "sandhub-removed $n" >&2
' sandhub-rm-batch | xargs -0 -r rm -rf --
"""
)
_REMOVED = re.compile(rb"sandhub-removed (\d+)")

# sh -c TAR_LIST sandhub-tar ROOT SIZE TOP: SIZE bytes of NUL-separated relative names on
# stdin (read with head -c: a TLS link to a remote engine cannot half-close stdin).
TAR_LIST = (
    ROOT_CHECK
    + r"""
enter "$1" "$3"; case $? in
    0) ;;
    44) echo "no such file or directory: $1" >&2; exit 44;;
    *) echo "permission denied: $1" >&2; exit 13;;
esac
head -c "$2" | tar -c -f - --null --no-recursion --hard-dereference --format=posix \
    --pax-option=delete=atime,delete=ctime --warning=no-file-changed -T -
"""
)


def runner(exec_in_sandbox: Callable[..., ExecResult], cwd: str) -> Run:
    """A Run over a backend's own exec (bound to one sandbox): the scripts' environment,
    timeout and output cap; a timeout is a BackendError."""

    def run(argv: list[str], stdin: bytes | None, cap: int) -> ExecResult:
        result = exec_in_sandbox(
            argv, cwd=cwd, env={}, timeout=TIMEOUT, output_cap=cap, stdin=stdin
        )
        if result.timed_out:
            raise BackendError(f"the sandbox did not answer within {TIMEOUT:g} s")
        return result

    return run


def names_blob(paths: list[str]) -> bytes:
    return b"".join(path.encode("utf-8", "surrogateescape") + b"\0" for path in paths)


def manifest_by_exec(
    run: Run, root: str, top: str, *, after: str | None, limit: int
) -> ManifestPage:
    result = run(["sh", "-c", MANIFEST, "sandhub-manifest", root, top], None, LISTING_CAP)
    message = result.stderr.decode("utf-8", "replace").strip()
    if result.exit_code == MISSING_EXIT:
        return ManifestPage(exists=False, entries=[], next=None)
    if result.exit_code == NOT_A_DIRECTORY_EXIT:
        raise NotADirectoryError(message)
    if result.exit_code == DENIED_EXIT:
        raise PermissionError(message)
    if result.stdout_truncated:
        raise BackendError(f"{root} holds too many entries to list without the sandbox agent")
    if result.exit_code not in (0, 1) or (result.exit_code == 1 and not result.stdout):
        # 1 with output: some subdirectory was unreadable; what could be read is listed.
        raise BackendError(f"cannot list {root}: {message or result.exit_code}")
    return parse_manifest(result.stdout, after=after, limit=limit)


def parse_manifest(listing: bytes, *, after: str | None, limit: int) -> ManifestPage:
    fields = listing.split(b"\0")
    entries: list[ManifestEntry] = []
    for at in range(0, len(fields) - _FIELDS + 1, _FIELDS):
        kind, size, mtime, mode, target, path = fields[at : at + _FIELDS]
        try:
            name, link = path.decode(), target.decode()
        except UnicodeDecodeError:
            continue  # cannot travel in JSON: left out, as the agent leaves it out
        if kind not in _KINDS or (after is not None and name <= after):
            continue
        entries.append(
            ManifestEntry(
                path=name,
                kind=_KINDS[kind],
                size=0 if kind == b"d" else int(size),
                mtime=float(mtime),
                mode=int(mode, 8),
                target=link if kind == b"l" else "",
            )
        )
    # str order is UTF-8 byte order (the order of code points).
    entries.sort(key=lambda entry: entry.path)
    more = len(entries) > limit
    page = entries[:limit]
    return ManifestPage(exists=True, entries=page, next=page[-1].path if more else None)


def delete_by_exec(run: Run, root: str, top: str, paths: list[str]) -> int:
    removed = 0
    for batch in _batches(paths):
        argv = ["sh", "-c", REMOVE, "sandhub-rm", root, top]
        result = run(argv, names_blob(batch), 64 * 1024)
        removed += sum(int(count) for count in _REMOVED.findall(result.stderr))
        if result.exit_code != 0:
            said = _REMOVED.sub(b"", result.stderr).decode("utf-8", "replace").strip()
            if result.exit_code == NOT_A_DIRECTORY_EXIT:
                raise NotADirectoryError(said)
            if "Permission denied" in said or result.exit_code == DENIED_EXIT:
                raise PermissionError(said or f"cannot enter {root}")
            raise BackendError(f"deleting under {root} failed: {said or result.exit_code}")
    return removed


def _batches(paths: list[str]) -> Iterator[list[str]]:
    batch: list[str] = []
    size = 0
    for path in paths:
        length = len(path.encode("utf-8", "surrogateescape")) + 1
        if batch and size + length > STDIN_BATCH:
            yield batch
            batch, size = [], 0
        batch.append(path)
        size += length
    if batch:
        yield batch
