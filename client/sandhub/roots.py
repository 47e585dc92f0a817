"""The local directories `sandhub mcp` may touch, and the check every local path passes first.

An agent drives the local MCP server, so a path it names is untrusted: without this check
`sync_local_to_remote("/home/me/.ssh", ...)` would copy the laptop's keys into a sandbox.
Paths are resolved the way the kernel would open them (symlinks followed, `..` applied)
before they are compared, so neither `root/../secret` nor a link inside a root that points
outside it gets through. The check runs before anything is read or written.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path


class OutsideRoots(ValueError):
    """A local path resolves outside every allowed root (or a root is unusable)."""


class Roots:
    """Allowed local directories, kept resolved; the first one anchors relative paths."""

    def __init__(self, directories: Iterable[str | os.PathLike[str]]) -> None:
        resolved: list[Path] = []
        for directory in directories:
            path = Path(os.path.realpath(Path(directory).expanduser()))
            if not path.is_dir():
                raise OutsideRoots(f"--root {directory}: not a directory")
            if path not in resolved:
                resolved.append(path)
        if not resolved:
            raise OutsideRoots("at least one --root directory is needed")
        self.paths: tuple[Path, ...] = tuple(resolved)

    def describe(self) -> str:
        return ", ".join(str(path) for path in self.paths)

    def contains(self, resolved: Path) -> bool:
        return any(resolved == root or root in resolved.parents for root in self.paths)

    def check(self, local_path: str) -> Path:
        """The resolved path for `local_path` when it lies inside a root, else OutsideRoots.

        Relative paths are taken from the first root (the project directory by default),
        not from wherever the server process happens to run. `~` is expanded. A path that
        does not exist yet (a download target) is resolved through its existing parents,
        so a symlinked parent pointing outside is caught as well.
        """
        if not local_path or "\x00" in local_path:
            raise OutsideRoots("local_path must be a non-empty path")
        candidate = Path(local_path).expanduser()
        if not candidate.is_absolute():
            candidate = self.paths[0] / candidate
        # realpath (not Path.resolve(strict=True)) so missing tails are allowed; it follows
        # every link in the existing part, including a final link.
        resolved = Path(os.path.realpath(candidate))
        if not self.contains(resolved):
            raise OutsideRoots(
                f"local path {local_path!r} resolves to {resolved}, outside the allowed "
                f"roots ({self.describe()}). Use a path inside them, or restart the server "
                f"with `sandhub mcp --root DIR` to allow another directory."
            )
        return resolved
