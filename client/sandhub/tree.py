"""Trees on both sides of a sync as flat maps of relative paths, the ignore rules that prune
them, and the plan that says what to send and what to remove.

Paths are relative to the sync root, POSIX, never "..". The local walk never follows a
symbolic link (a link is an entry of its own, sent as a link), so nothing outside the root is
ever read.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pathspec import GitIgnoreSpec

FILE, DIR, LINK = "file", "dir", "link"
ALWAYS_EXCLUDED = ".git"  # a repository's own database is never synced, at any depth
GITIGNORE = ".gitignore"
PERMISSION_BITS = 0o777  # compared and kept; setuid/setgid/sticky are not carried across
# Remote mtimes come as float seconds, which keep ~0.24 us at today's dates: closer than this
# counts as the same time when both sides have sub-second times.
SAME_TIME_NS = 1_000
NS = 1_000_000_000


@dataclass(frozen=True, slots=True)
class Entry:
    path: str  # relative to the root, POSIX
    kind: str  # FILE, DIR or LINK
    size: int
    mtime_ns: int
    mode: int  # permission bits (0o7777)
    target: str = ""  # links only

    @classmethod
    def from_manifest(cls, item: Mapping[str, object]) -> Entry:
        """An entry of the platform's manifest (mtime in float seconds)."""
        mtime = item.get("mtime") or 0
        size = item.get("size") or 0
        mode = item.get("mode") or 0
        assert isinstance(mtime, int | float) and isinstance(size, int) and isinstance(mode, int)
        return cls(
            path=str(item["path"]),
            kind=str(item["kind"]),
            size=size,
            mtime_ns=round(mtime * NS),
            mode=mode,
            target=str(item.get("target") or ""),
        )


def same_time(a_ns: int, b_ns: int) -> bool:
    """Equal to the second when either side has whole seconds only (a filesystem or an
    archive without sub-second times), else equal within SAME_TIME_NS."""
    if a_ns % NS == 0 or b_ns % NS == 0:
        return a_ns // NS == b_ns // NS
    return abs(a_ns - b_ns) <= SAME_TIME_NS


def ancestors(path: str) -> Iterable[str]:
    """The directories whose rules apply to `path`: "a/b/c" -> "a/b", "a", "" (the root)."""
    while path:
        path = path.rpartition("/")[0]
        yield path


class Rules:
    """What a sync leaves out: `.git` always, the --exclude patterns, and (unless turned off)
    every .gitignore of the tree, each applying below its own directory.

    Patterns are gitwildmatch (pathspec's GitIgnoreSpec); as in git, the innermost .gitignore
    that has a say decides (a nested `!pattern` re-includes), and nothing below an excluded
    directory comes back. Excludes win over everything.
    """

    def __init__(self, excludes: Sequence[str] = (), *, gitignore: bool = True) -> None:
        self.gitignore = gitignore
        self._excludes = GitIgnoreSpec.from_lines(list(excludes)) if excludes else None
        self._specs: dict[str, GitIgnoreSpec] = {}  # directory -> its .gitignore
        self._dirs: dict[str, bool] = {}  # directory -> excluded (memo)

    def add_gitignore(self, directory: str, text: str) -> None:
        """The rules of `directory`/.gitignore (directory "" is the root)."""
        if self.gitignore:
            lines = text.splitlines()
            if any(line.strip() and not line.startswith("#") for line in lines):
                self._specs[directory] = GitIgnoreSpec.from_lines(lines)

    def excluded(self, path: str, is_dir: bool) -> bool:
        parent = path.rpartition("/")[0]
        if parent and self._dir_excluded(parent):
            return True
        return self._matches(path, is_dir)

    def _dir_excluded(self, path: str) -> bool:
        known = self._dirs.get(path)
        if known is None:
            known = self.excluded(path, is_dir=True)
            self._dirs[path] = known
        return known

    def _matches(self, path: str, is_dir: bool) -> bool:
        name = path.rpartition("/")[2]
        if name == ALWAYS_EXCLUDED:
            return True
        suffix = "/" if is_dir else ""  # so that "build/" patterns match directories only
        if self._excludes is not None and self._excludes.match_file(path + suffix):
            return True
        for directory in ancestors(path):  # innermost first
            spec = self._specs.get(directory)
            if spec is None:
                continue
            relative = path[len(directory) + 1 :] if directory else path
            verdict = spec.check_file(relative + suffix).include
            if verdict is not None:
                return verdict
        return False


def walk_local(root: Path, rules: Rules, *, read_gitignore: bool = True) -> dict[str, Entry]:
    """Every file, directory and link under `root` that the rules keep (lstat, never
    following links), by relative path. The tree's .gitignore files are read as their
    directory is reached, before its entries are judged (not with read_gitignore=False: a
    pull takes the sandbox's rules)."""
    entries: dict[str, Entry] = {}
    pending = [""]
    while pending:
        directory = pending.pop()
        absolute = os.path.join(root, directory) if directory else os.fspath(root)
        if read_gitignore and rules.gitignore:
            _read_gitignore(absolute, directory, rules)
        with os.scandir(absolute) as listing:
            for item in listing:
                path = f"{directory}/{item.name}" if directory else item.name
                info = item.stat(follow_symlinks=False)
                kind = _kind(info.st_mode)
                if kind is None or rules.excluded(path, kind == DIR):
                    continue  # sockets, fifos and devices are not synced
                target = os.readlink(item.path) if kind == LINK else ""
                entries[path] = Entry(
                    path=path,
                    kind=kind,
                    size=info.st_size if kind == FILE else 0,
                    mtime_ns=info.st_mtime_ns,
                    mode=stat.S_IMODE(info.st_mode),
                    target=target,
                )
                if kind == DIR:
                    pending.append(path)
    return entries


def _read_gitignore(absolute: str, directory: str, rules: Rules) -> None:
    path = os.path.join(absolute, GITIGNORE)
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return  # as git: a .gitignore that is a link is not read
        with open(path, encoding="utf-8", errors="replace") as handle:
            rules.add_gitignore(directory, handle.read())
    except FileNotFoundError:
        return


def _kind(mode: int) -> str | None:
    if stat.S_ISREG(mode):
        return FILE
    if stat.S_ISDIR(mode):
        return DIR
    if stat.S_ISLNK(mode):
        return LINK
    return None


def kept(entries: Iterable[Entry], rules: Rules) -> dict[str, Entry]:
    """The entries (e.g. the remote manifest) that the rules keep, by path."""
    return {e.path: e for e in entries if not rules.excluded(e.path, e.kind == DIR)}


@dataclass
class Plan:
    """What a sync does, from source to destination."""

    send: list[Entry] = field(default_factory=list)  # in path order: directories first
    replace: list[str] = field(default_factory=list)  # destination entries of another kind
    extras: list[str] = field(default_factory=list)  # only at the destination (outermost)
    unchanged: int = 0  # files and links already equal

    @property
    def send_bytes(self) -> int:
        return sum(entry.size for entry in self.send)


def plan(source: Mapping[str, Entry], destination: Mapping[str, Entry]) -> Plan:
    """Files differing in size, mtime or permission bits, links in target, directories that
    are missing or differ in permissions; destination entries of another kind are replaced
    (removed first), and those the source lacks are extras."""
    result = Plan()
    for path in sorted(source, key=os.fsencode):
        entry, other = source[path], destination.get(path)
        if other is not None and (other.kind == DIR) != (entry.kind == DIR):
            result.replace.append(path)  # a file cannot overwrite a directory, nor the reverse
            other = None
        if other is None or not _equal(entry, other):
            result.send.append(entry)
        elif entry.kind != DIR:
            result.unchanged += 1
    gone = set(result.replace)
    for path in sorted(destination, key=os.fsencode):
        if path in source or any(parent in gone for parent in ancestors(path)):
            continue
        result.extras.append(path)
        gone.add(path)
    return result


def _equal(entry: Entry, other: Entry) -> bool:
    if entry.kind != other.kind:
        return False
    if entry.kind == LINK:
        return entry.target == other.target
    if (entry.mode & PERMISSION_BITS) != (other.mode & PERMISSION_BITS):
        return False
    if entry.kind == DIR:
        return True
    return entry.size == other.size and same_time(entry.mtime_ns, other.mtime_ns)
