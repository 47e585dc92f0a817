"""The platform's files on disk are its own: no other Unix user of the machine may read them.

The SQLite database holds every team's sessions, keys' hashes and command output; `var/` holds
the Django and credential secrets; the disk images hold every sandbox's workspace. A sandbox
user (or any other account) on the same machine that can read them can act as any team.

So every platform process starts by setting its umask to 077 (`restrict_umask`, called first
by manage.py and the ASGI and WSGI entry points), so whatever it creates (the database and its
-wal and -shm, collected files, disk metadata) is its owner's alone; and at start (the
platform app's `ready`) `correct_modes` takes group and other access away from what an older
version or an admin's umask left open, saying so once in the log. The places that create
these files also pass private modes explicitly, so they stay private in any process.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Iterable
from pathlib import Path

logger = logging.getLogger("sandhub.files")

PRIVATE_UMASK = 0o077
_OTHERS = stat.S_IRWXG | stat.S_IRWXO
# SQLite's companions of a database file: written beside it with the same content's secrets.
SQLITE_COMPANIONS = ("", "-wal", "-shm", "-journal")


def restrict_umask() -> None:
    os.umask(PRIVATE_UMASK)


def private_directory(path: Path) -> Path:
    """Create `path` as 0700 where it is missing (an existing one is `correct_modes`' to
    tighten, at start, where the log says so)."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


def write_private_file(path: Path, text: str) -> None:
    """Create `path` readable by its owner alone from the first byte (no chmod after)."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        handle.write(text)


def correct_modes(
    directories: Iterable[Path], files: Iterable[Path], file_globs: Iterable[tuple[Path, str]]
) -> list[str]:
    """Take group and other access from each existing path; log and return what changed.

    `directories` are the platform's own (0700); `files` and the files matching each
    (directory, pattern) become 0600 or stricter. Missing paths are skipped.
    """
    paths = [*directories, *files]
    for directory, pattern in file_globs:
        if directory.is_dir():
            paths.extend(sorted(directory.glob(pattern)))
    corrected = [message for path in paths if (message := _restrict(path))]
    if corrected:
        logger.warning(
            "files of the platform were readable by other users; corrected: %s",
            "; ".join(corrected),
        )
    return corrected


def _restrict(path: Path) -> str | None:
    """Drop group and other bits from `path` (not following a link); what changed, if any."""
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(mode) or not mode & _OTHERS:
        return None
    new = stat.S_IMODE(mode) & ~_OTHERS
    path.chmod(new)
    return f"{path} {stat.S_IMODE(mode):04o} -> {new:04o}"
