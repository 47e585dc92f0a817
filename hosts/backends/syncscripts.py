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
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

from hosts.backends.base import BackendError, ExecResult, ManifestEntry, ManifestPage

MISSING_EXIT = 44  # the root is not there
NOT_A_DIRECTORY_EXIT = 45  # the root is a file or a link
DENIED_EXIT = 13
LISTING_CAP = 64 * 1024 * 1024  # a plain-path manifest's find output (about 600k entries)
STDIN_BATCH = 60 * 1024  # bytes of names per REMOVE exec (Docker's per-command limit: 64 KiB)
TIMEOUT = 120.0

# Runs a backend exec: (argv, stdin, output cap) -> its result.
Run = Callable[[list[str], bytes | None, int], ExecResult]

# sh -c MANIFEST sandhub-manifest ROOT
MANIFEST = r"""
if [ -L "$1" ] || { [ -e "$1" ] && [ ! -d "$1" ]; }; then
    echo "$1 is not a directory" >&2; exit 45
fi
[ -e "$1" ] || exit 44
cd -- "$1" || exit 13
exec find . -mindepth 1 \( -type f -o -type d -o -type l \) \
    -printf '%y\0%s\0%T@\0%m\0%l\0%P\0'
"""
_FIELDS = 6
_KINDS = {b"f": "file", b"d": "dir", b"l": "link"}

# sh -c REMOVE sandhub-rm ROOT, relative names NUL-separated on stdin. Prints on stderr one
# "sandhub-removed N" per batch of xargs (N: the names that existed and were handed to rm).
REMOVE = r"""
[ -e "$1" ] || [ -L "$1" ] || exit 0
cd -P -- "$1" || exit 13
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
_REMOVED = re.compile(rb"sandhub-removed (\d+)")

# sh -c TAR_LIST sandhub-tar ROOT SIZE: SIZE bytes of NUL-separated relative names on stdin
# (read with head -c: a TLS link to a remote engine cannot half-close stdin).
TAR_LIST = r"""
if ! cd -- "$1" 2>/dev/null; then
    [ -d "$1" ] && { echo "permission denied: $1" >&2; exit 13; }
    echo "no such file or directory: $1" >&2; exit 44
fi
head -c "$2" | tar -c -f - --null --no-recursion --hard-dereference --format=posix \
    --pax-option=delete=atime,delete=ctime --warning=no-file-changed -T -
"""


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


def manifest_by_exec(run: Run, root: str, *, after: str | None, limit: int) -> ManifestPage:
    result = run(["sh", "-c", MANIFEST, "sandhub-manifest", root], None, LISTING_CAP)
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


def delete_by_exec(run: Run, root: str, paths: list[str]) -> int:
    removed = 0
    for batch in _batches(paths):
        argv = ["sh", "-c", REMOVE, "sandhub-rm", root]
        result = run(argv, names_blob(batch), 64 * 1024)
        removed += sum(int(count) for count in _REMOVED.findall(result.stderr))
        if result.exit_code != 0:
            said = _REMOVED.sub(b"", result.stderr).decode("utf-8", "replace").strip()
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
