"""A stand-in for the platform's sync endpoints (the contract of issue 13), served to the
client's real httpx transport stack through httpx's MockTransport, over a real directory.

It is deliberately written without the client's own code (its own tar writing and
extraction), so the client's tar streams are read and made by plain tarfile here.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import stat
import tarfile
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx2 as httpx
from sandhub.api import Platform

SANDBOX = "sb_fake00000000"
WORKSPACE = "/workspace"


@dataclass
class Call:
    method: str
    route: str
    files: int = 0  # members of an uploaded tar, or paths of a delete/download


@dataclass
class FakePlatform:
    workspace: Path  # stands for /workspace of the one sandbox
    calls: list[Call] = field(default_factory=list)

    def platform(self) -> Platform:
        return Platform("http://sandhub.test", "shk_test", transport=httpx.MockTransport(self))

    def root(self, path: str) -> Path:
        relative = os.path.normpath(os.path.join(WORKSPACE, path))[len(WORKSPACE) :]
        return self.workspace / relative.lstrip("/")

    def __call__(self, request: httpx.Request) -> httpx.Response:
        prefix = f"/api/v1/sandboxes/{SANDBOX}/"
        if not request.url.path.startswith(prefix):
            return _error(404, f"sandbox {request.url.path.split('/')[4]} not found")
        route = request.url.path.removeprefix(prefix)
        call = Call(request.method, route)
        self.calls.append(call)
        if route == "manifest/":
            return self.manifest(request)
        if route == "sync/":
            return self.upload(request, call)
        body = json.loads(request.read() or b"{}")
        call.files = len(body.get("paths", []))
        if route == "sync/delete/":
            return self.delete(body)
        if route == "sync/download/":
            return self.download(body)
        return _error(404, f"no route {route}")

    def manifest(self, request: httpx.Request) -> httpx.Response:
        root = self.root(request.url.params["path"])
        after = request.url.params.get("after")
        limit = int(request.url.params.get("limit", "1000"))
        if root.exists() and not root.is_dir():
            return _error(400, f"{root} is not a directory")
        entries = sorted(_tree(root), key=lambda e: os.fsencode(e["path"])) if root.is_dir() else []
        if after is not None:
            entries = [e for e in entries if os.fsencode(e["path"]) > os.fsencode(after)]
        page, rest = entries[:limit], entries[limit:]
        return httpx.Response(
            200,
            json={
                "path": str(root),
                "exists": root.is_dir(),
                "entries": page,
                "next": page[-1]["path"] if rest else None,
            },
        )

    def upload(self, request: httpx.Request, call: Call) -> httpx.Response:
        root = self.root(request.url.params["path"])
        root.mkdir(parents=True, exist_ok=True)
        with tarfile.open(fileobj=io.BytesIO(request.read()), mode="r:") as archive:
            members = archive.getmembers()
            for member in members:
                target = root / member.name
                if member.isdir():
                    target.mkdir(parents=True, exist_ok=True)
                elif member.issym():
                    if target.is_symlink() or target.exists():
                        target.unlink()
                    target.symlink_to(member.linkname)
                else:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    source = archive.extractfile(member)
                    assert source is not None
                    target.write_bytes(source.read())
                ns = int(Decimal(member.pax_headers.get("mtime", str(member.mtime))) * 10**9)
                if not member.issym():
                    os.chmod(target, member.mode)
                os.utime(target, ns=(ns, ns), follow_symlinks=False)
        call.files = sum(1 for m in members if m.isfile())
        total = sum(m.size for m in members if m.isfile())
        return httpx.Response(200, json={"path": str(root), "files": call.files, "bytes": total})

    def delete(self, body: dict[str, Any]) -> httpx.Response:
        root = self.root(body["path"])
        for name in body["paths"]:
            target = root / name
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)
            else:
                target.unlink()
        return httpx.Response(200, json={"path": str(root), "deleted": len(body["paths"])})

    def download(self, body: dict[str, Any]) -> httpx.Response:
        root = self.root(body["path"])
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
            for name in body["paths"]:
                info = archive.gettarinfo(str(root / name), arcname=name)
                info.pax_headers = {"mtime": _pax_time(os.lstat(root / name).st_mtime_ns)}
                if info.isfile():
                    with open(root / name, "rb") as handle:
                        archive.addfile(info, handle)
                else:
                    archive.addfile(info)
        return httpx.Response(200, content=buffer.getvalue())


def _pax_time(ns: int) -> str:
    return f"{ns // 10**9}.{ns % 10**9:09d}"


def _tree(root: Path) -> list[dict[str, Any]]:
    entries = []
    for directory, dirs, files in os.walk(root):
        for name in dirs + files:
            full = os.path.join(directory, name)
            info = os.lstat(full)
            kind = (
                "link"
                if stat.S_ISLNK(info.st_mode)
                else "dir"
                if stat.S_ISDIR(info.st_mode)
                else "file"
            )
            entry = {
                "path": os.path.relpath(full, root),
                "kind": kind,
                "size": info.st_size if kind == "file" else 0,
                "mtime": info.st_mtime_ns / 10**9,
                "mode": stat.S_IMODE(info.st_mode),
            }
            if kind == "link":
                entry["target"] = os.readlink(full)
            entries.append(entry)
    return entries


def _error(status: int, detail: str) -> httpx.Response:
    return httpx.Response(status, json={"detail": detail, "code": "fake"})
