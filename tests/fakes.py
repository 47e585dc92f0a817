"""An in-memory backend for fast service-layer tests. Every real backend is proven against
the real thing elsewhere (tests/test_docker_backend.py, tests/test_services_docker.py)."""

from __future__ import annotations

import io
import itertools
import posixpath
import shlex
import tarfile
import time
from collections.abc import Iterator
from typing import Any

from hosts.backends.base import (
    BackendError,
    ExecResult,
    FileEntry,
    HeadTailBuffer,
    ProbeResult,
    SandboxBackend,
    SandboxGone,
    SandboxSpec,
)


class FakeBackend(SandboxBackend):
    """Sandboxes are dicts of files; `echo`, `cat`, `exit N` and `sleep` are understood."""

    kind = "fake"
    sandboxes: dict[str, dict[str, Any]] = {}
    fail_provision: str | None = None
    _ids = itertools.count(1)

    def provision(self, spec: SandboxSpec) -> dict[str, Any]:
        if self.fail_provision:
            raise BackendError(self.fail_provision)
        key = f"fake-{next(self._ids)}"
        self.sandboxes[key] = {"spec": spec, "files": {}, "running": True}
        return {"container_id": key}

    def _box(self, state: dict[str, Any]) -> dict[str, Any]:
        box = self.sandboxes.get(state.get("container_id", ""))
        if box is None:
            raise SandboxGone("container is gone")
        return box

    def destroy(self, state: dict[str, Any]) -> None:
        self.sandboxes.pop(state.get("container_id", ""), None)

    def status(self, state: dict[str, Any]) -> str:
        return "running" if state.get("container_id") in self.sandboxes else "missing"

    def exec(self, state, argv, *, cwd, env, timeout, output_cap, on_output=None, stdin=None):
        box = self._box(state)
        started = time.monotonic()
        out, err, code, timed_out = self._interpret(box, argv, env, timeout)
        stdout, stderr = HeadTailBuffer(output_cap), HeadTailBuffer(output_cap)
        stdout.write(out)
        stderr.write(err)
        if on_output and out:
            on_output("stdout", out)
        return ExecResult(
            exit_code=code,
            stdout=stdout.getvalue(),
            stderr=stderr.getvalue(),
            stdout_bytes=stdout.total,
            stderr_bytes=stderr.total,
            stdout_truncated=stdout.truncated,
            stderr_truncated=stderr.truncated,
            timed_out=timed_out,
            duration_seconds=time.monotonic() - started,
        )

    def _interpret(self, box, argv, env, timeout) -> tuple[bytes, bytes, int | None, bool]:
        if argv[:2] == ["sh", "-c"] and "stat -c %s" in argv[2]:  # read_file's range read
            path, start, length = argv[4], int(argv[5]) - 1, int(argv[6])
            if path not in box["files"]:
                return b"", b"no such file", 1, False
            data = box["files"][path]
            return data[start : start + length], f"{len(data)}\n".encode(), 0, False
        if argv[:2] != ["bash", "-c"]:
            return b"", b"", 0, False
        words = shlex.split(argv[2])
        if words[0] == "echo":
            return " ".join(words[1:]).encode() + b"\n", b"", 0, False
        if words[0] == "printenv":
            return env.get(words[1], "").encode() + b"\n", b"", 0, False
        if words[0] == "exit":
            return b"", b"", int(words[1]), False
        if words[0] == "sleep":
            if float(words[1]) > timeout:
                return b"", b"", None, True
            return b"", b"", 0, False
        if words[0] == "yes":  # prints a lot, like `yes | head -c N`
            return b"y\n" * (int(words[-1]) // 2), b"", 0, False
        return b"", f"fake: {words[0]}: command not found\n".encode(), 127, False

    def put_files(self, state, dest_dir, tar_stream):
        box = self._box(state)
        with tarfile.open(fileobj=io.BytesIO(tar_stream)) as archive:
            for member in archive:
                if member.isfile():
                    handle = archive.extractfile(member)
                    path = posixpath.join(dest_dir, member.name)
                    box["files"][path] = handle.read() if handle else b""

    def get_files(self, state, path) -> Iterator[bytes]:
        box = self._box(state)
        matches = {p: c for p, c in box["files"].items() if p == path or p.startswith(path + "/")}
        if not matches:
            raise FileNotFoundError(path)
        parent = posixpath.dirname(path.rstrip("/"))
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as archive:
            for file_path, content in matches.items():
                info = tarfile.TarInfo(posixpath.relpath(file_path, parent))
                info.size = len(content)
                archive.addfile(info, io.BytesIO(content))
        data = buffer.getvalue()
        return iter([data[i : i + 4096] for i in range(0, len(data), 4096)])

    def list_dir(self, state, path) -> list[FileEntry]:
        box = self._box(state)
        entries = [
            FileEntry(posixpath.basename(p), p, "file", len(c), 0.0, "644")
            for p, c in box["files"].items()
            if posixpath.dirname(p) == path or p == path
        ]
        if not entries:
            raise FileNotFoundError(path)
        return entries

    def probe(self) -> ProbeResult:
        return ProbeResult(
            healthy=True,
            cpu_percent=10.0,
            memory_percent=20.0,
            sandboxes_running=len(self.sandboxes),
        )
