"""The in-memory backend's side of the files section's operations (sandboxes/services/
file_ops.py): the FILE_OP script's probe, mkdir and rename interpreted on a box's files, its
folders (box["dirs"], besides those implied by files) and its links (box["links"]: path ->
target), with the script's exit codes; delete_entries; and list_dir showing folders.
A mixin of tests/fakes.py's FakeBackend. Not a test module."""

from __future__ import annotations

import posixpath
from typing import Any

from hosts.backends.base import FileEntry

ROOT = "/workspace"


def _dirs(box: dict[str, Any]) -> set[str]:
    """Every folder of the box: made ones and those holding a file."""
    found = set(box.setdefault("dirs", set()))
    for path in box["files"]:
        parent = posixpath.dirname(path)
        while parent.startswith(ROOT + "/"):
            found.add(parent)
            parent = posixpath.dirname(parent)
    return found


def _exists(box: dict[str, Any], path: str) -> bool:
    return path in box["files"] or path in _dirs(box) or path in box.setdefault("links", {})


class FakeFileOps:
    def _file_op(self, box: dict[str, Any], args: list[str]) -> tuple[bytes, bytes, int, bool]:
        op, paths = args[0], [posixpath.join(ROOT, p) for p in args[1:]]
        try:
            if op == "probe":
                self._walk(box, paths[0])
                self._need(box, paths[0])
            elif op == "mkdir":
                self._walk(box, paths[0], make=True)
                if _exists(box, paths[0]):
                    raise _Exit(45, f"{paths[0]} already exists")
                box["dirs"].add(paths[0])
            elif op == "rename":
                self._walk(box, paths[0])
                self._need(box, paths[0])
                self._walk(box, paths[1])
                if _exists(box, paths[1]):
                    raise _Exit(45, f"{paths[1]} already exists")
                self._move(box, paths[0], paths[1])
        except _Exit as stop:
            return b"", stop.message.encode() + b"\n", stop.code, False
        return b"", b"", 0, False

    def _walk(self, box: dict[str, Any], path: str, make: bool = False) -> None:
        done = ROOT
        for part in posixpath.relpath(posixpath.dirname(path), ROOT).split("/"):
            if part == ".":
                break
            done = f"{done}/{part}"
            if done in box.setdefault("links", {}):
                raise _Exit(47, f"{done} is a symbolic link: operations stay inside {ROOT}")
            if done in box["files"]:
                raise _Exit(46, f"{done} is a file, not a folder")
            if done not in _dirs(box):
                if not make:
                    raise _Exit(44, f"no folder {done}")
                box.setdefault("dirs", set()).add(done)

    @staticmethod
    def _need(box: dict[str, Any], path: str) -> None:
        if not _exists(box, path):
            raise _Exit(44, f"{path} not found")

    @staticmethod
    def _move(box: dict[str, Any], source: str, destination: str) -> None:
        def moved(path: str) -> str:
            return destination + path[len(source) :]

        def under(path: str) -> bool:
            return path == source or path.startswith(source + "/")

        for name in ("files", "links"):
            table = box.setdefault(name, {})
            for path in [p for p in table if under(p)]:
                table[moved(path)] = table.pop(path)
        box["dirs"] = {moved(d) if under(d) else d for d in _dirs(box)}

    def delete_entries(self, state: dict[str, Any], root: str, paths: list[str]) -> int:
        box = self._box(state)  # type: ignore[attr-defined]
        removed = 0
        for relative in paths:
            target = posixpath.join(root, relative)
            if not _exists(box, target):
                continue
            removed += 1
            for name in ("files", "links"):
                table = box.setdefault(name, {})
                for path in [p for p in table if p == target or p.startswith(target + "/")]:
                    del table[path]
            box["dirs"] = {d for d in _dirs(box) if d != target and not d.startswith(target + "/")}
        return removed

    def list_dir(self, state: dict[str, Any], path: str) -> list[FileEntry]:
        box = self._running_box(state)  # type: ignore[attr-defined]
        entries = [
            FileEntry(posixpath.basename(p), p, "file", len(c), 0.0, "644")
            for p, c in box["files"].items()
            if posixpath.dirname(p) == path or p == path
        ]
        entries += [
            FileEntry(posixpath.basename(d), d, "dir", 0, 0.0, "755")
            for d in _dirs(box)
            if posixpath.dirname(d) == path
        ]
        entries += [
            FileEntry(posixpath.basename(p), p, "link", 0, 0.0, "777")
            for p in box.setdefault("links", {})
            if posixpath.dirname(p) == path
        ]
        if not entries and path not in _dirs(box):
            raise FileNotFoundError(path)
        return entries


class _Exit(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message
