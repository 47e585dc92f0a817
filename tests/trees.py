"""Trees on this machine for the sync tests (tests/services/test_sync.py, tests/api/test_sync.py,
tests/ssh/test_sync.py, tests/docker/test_sync.py): made with modes, nanosecond mtimes, a link
and awkward names, sent as a pax tar, and compared back byte for byte. Not a test module."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path
from typing import Any

ROOT = "/workspace/proj"
MTIME_NS = 1_700_000_000_123_456_789


def make_tree(base: Path) -> dict[str, Any]:
    """A small tree with modes, nanosecond mtimes, a link, an empty file and awkward names
    (bytewise order: 'a-x' < 'a.txt' < 'a/...')."""
    files = {
        "a.txt": b"dot\n",
        "a-x": b"dash\n",
        "a/b.py": b"print('hi')\n",
        "a/deep/c.bin": bytes(range(256)) * 300,
        "empty": b"",
        "run.sh": b"#!/bin/sh\necho run\n",
        "sp ace/\u00e9t\u00e9.txt": b"unicode\n",
    }
    for number, (name, content) in enumerate(files.items()):
        path = base / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        os.utime(path, ns=(MTIME_NS, MTIME_NS + number * 1_000_000_007))
    (base / "run.sh").chmod(0o750)
    (base / "a.txt").chmod(0o600)
    os.symlink("a/b.py", base / "link")
    return files


def tar_of(base: Path, names: list[str] | None = None) -> bytes:
    """A pax tar of `names` (default: everything) under base, names relative, exact ns."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as archive:
        chosen = names if names is not None else walk(base)
        for name in chosen:
            full = base / name
            info = archive.gettarinfo(str(full), arcname=name)
            ns = full.lstat().st_mtime_ns
            info.pax_headers = {"mtime": f"{ns // 10**9}.{ns % 10**9:09d}"}
            if info.isfile():
                with open(full, "rb") as handle:
                    archive.addfile(info, handle)
            else:
                archive.addfile(info)
    return out.getvalue()


def walk(base: Path) -> list[str]:
    names = []
    for directory, subdirs, files in os.walk(base):
        for name in subdirs + files:
            names.append(os.path.relpath(os.path.join(directory, name), base))
    return sorted(names, key=lambda n: n.encode())


def snapshot(base: Path) -> dict[str, tuple[str, int, int, bytes | str]]:
    """name -> (kind, mode, mtime ns, content or link target) of every entry but dirs' mtime
    (a directory's mtime changes when its content is written)."""
    result: dict[str, tuple[str, int, int, bytes | str]] = {}
    for name in walk(base):
        full = base / name
        info = full.lstat()
        if full.is_symlink():
            result[name] = ("link", 0, 0, os.readlink(full))
        elif full.is_dir():
            result[name] = ("dir", info.st_mode & 0o7777, 0, b"")
        else:
            result[name] = ("file", info.st_mode & 0o7777, info.st_mtime_ns, full.read_bytes())
    return result


def extract(data: bytes, target: Path) -> None:
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        for member in archive:
            archive.extract(member, target, filter="fully_trusted", numeric_owner=False)
            exact = member.pax_headers.get("mtime")
            if exact and not member.issym():
                seconds, _, fraction = exact.partition(".")
                ns = int(seconds) * 10**9 + int((fraction + "000000000")[:9])
                os.utime(target / member.name, ns=(ns, ns), follow_symlinks=False)
