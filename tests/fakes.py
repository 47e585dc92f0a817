"""An in-memory backend for fast service-layer tests. Every real backend is proven against
the real thing elsewhere (tests/docker/, tests/services/test_sandboxes_docker.py)."""

from __future__ import annotations

import io
import itertools
import posixpath
import shlex
import socket
import tarfile
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from hosts.backends.base import (
    LABEL_INSTANCE,
    LABEL_POOL,
    BackendError,
    ExecResult,
    HeadTailBuffer,
    JobStatus,
    ManagedResource,
    PortClosed,
    PortStream,
    ProbeResult,
    SandboxBackend,
    SandboxGone,
    SandboxSpec,
)
from tests.fake_file_ops import FakeFileOps
from tests.fake_snapshots import FakeSnapshots
from tests.fake_terminals import FakeTerminals
from tests.fake_usage import FakeUsage


class SocketPortStream(PortStream):
    """A PortStream over a real loopback TCP connection (the fake's open_port)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.closed = False

    def read(self, max_bytes: int = 65536, timeout: float | None = None) -> bytes:
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(max_bytes)
        except TimeoutError:  # socket.timeout is TimeoutError: said so, as the interface does
            raise TimeoutError(f"nothing came within {timeout} s") from None
        except OSError as exc:
            raise BackendError(f"port stream: {exc}") from exc

    def write(self, data: bytes) -> None:
        self.sock.settimeout(None)
        try:
            self.sock.sendall(data)
        except OSError as exc:
            raise BackendError(f"port stream: {exc}") from exc

    def close_write(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_WR)
        except OSError as exc:
            raise BackendError(f"port stream: {exc}") from exc

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.sock.close()


class FakeBackend(FakeTerminals, FakeUsage, FakeFileOps, FakeSnapshots, SandboxBackend):
    """Sandboxes are dicts of files; `echo`, `cat`, `exit N` and `sleep` are understood."""

    kind = "fake"
    sandboxes: dict[str, dict[str, Any]] = {}
    fail_provision: str | None = None
    _ids = itertools.count(1)

    def provision(self, spec: SandboxSpec) -> dict[str, Any]:
        if self.fail_provision:
            raise BackendError(self.fail_provision)
        key = f"fake-{next(self._ids)}"
        files = self.snapshot_files(spec.snapshot) if spec.snapshot else {}
        if spec.snapshot:
            self.provisioned_from.append(dict(spec.snapshot))
        self.sandboxes[key] = {
            "spec": spec,
            "files": files,
            "running": True,
            "created": time.time(),
        }
        return {"container_id": key}

    def _box(self, state: dict[str, Any]) -> dict[str, Any]:
        box = self.sandboxes.get(state.get("container_id", ""))
        if box is None:
            raise SandboxGone("container is gone")
        return box

    def destroy(self, state: dict[str, Any]) -> None:
        self.sandboxes.pop(state.get("container_id", ""), None)

    def status(self, state: dict[str, Any]) -> str:
        box = self.sandboxes.get(state.get("container_id", ""))
        return "missing" if box is None else box.get("state", "running")

    # --- pause, resume, stop, start: a state per box; `lifecycle_gate` (an Event) holds each
    # call until it is set (a race test's window; `lifecycle_held` is set once a call waits
    # there); `fail_lifecycle` fails them. ----------------------------------------------------
    lifecycle_gate: threading.Event | None = None
    lifecycle_held = threading.Event()
    fail_lifecycle: str | None = None
    lifecycle_calls: list[tuple[str, str]] = []

    def _lifecycle(self, state: dict[str, Any], op: str, before: set[str], after: str) -> None:
        box = self._box(state)
        self.lifecycle_calls.append((op, state.get("container_id", "")))
        if self.lifecycle_gate is not None:
            self.lifecycle_held.set()
            assert self.lifecycle_gate.wait(30), "the test never opened the gate"
        if self.fail_lifecycle:
            raise BackendError(self.fail_lifecycle)
        if box.get("state", "running") not in before | {after}:
            raise BackendError(f"cannot {op} a {box.get('state')} container")
        box["state"] = after
        box["running"] = after == "running"

    def pause(self, state: dict[str, Any]) -> None:
        self._lifecycle(state, "pause", {"running"}, "paused")

    def resume(self, state: dict[str, Any]) -> None:
        self._lifecycle(state, "resume", {"paused"}, "running")

    def stop(self, state: dict[str, Any]) -> None:
        self._lifecycle(state, "stop", {"running", "paused"}, "stopped")
        self._box(state).pop("jobs", None)  # every process ended

    def start(self, state: dict[str, Any]) -> None:
        self._lifecycle(state, "start", {"stopped"}, "running")

    def _running_box(self, state: dict[str, Any]) -> dict[str, Any]:
        box = self._box(state)
        if box.get("state", "running") != "running":  # a real agent would wait for a thaw
            raise BackendError(f"fake: the container is {box['state']}")
        return box

    def exec(
        self,
        state,
        argv,
        *,
        cwd,
        env,
        timeout,
        output_cap,
        on_output=None,
        stdin=None,
        once=False,
        marker=None,
    ):
        box = self._running_box(state)
        started = time.monotonic()
        out, err, code, timed_out = self._interpret(box, argv, env, timeout)
        if stdin is not None and argv == ["bash", "-c", "cat"]:  # `cat` gives back its stdin
            out, err, code = stdin, b"", 0
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
                missing = f"stat: cannot statx {path!r}: No such file or directory"
                return b"", missing.encode(), 1, False
            data = box["files"][path]
            return data[start : start + length], f"{len(data)}\n".encode(), 0, False
        if argv[:2] == ["sh", "-c"] and argv[3:4] == ["sandhub-fileop"]:
            return self._file_op(box, argv[4:])
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

    # --- background jobs: a plan of timed output, run against the wall clock ---------------
    # `sleep N` steps advance the job's clock, `exit N` ends it, `serve PORT` makes the job
    # an app listening on PORT while it runs (see open_port), everything else prints (via
    # _interpret) at the time it is reached; steps are separated by `;`. A job past its timeout
    # ends with 124, as the real runner's `timeout` makes it, unless enforce_job_timeouts is off
    # (to test the supervisor's own kill).
    enforce_job_timeouts = True

    def start_background(self, state, argv, *, cwd, env, job_id, timeout=None) -> dict[str, Any]:
        box = self._running_box(state)
        jobs = box.setdefault("jobs", {})
        if job_id in jobs:
            raise BackendError(f"job {job_id} exists")
        events, duration, code = self._plan(box, argv, env)
        if timeout is not None and duration > timeout and self.enforce_job_timeouts:
            events = [(t, data) for t, data in events if t <= timeout]
            duration, code = timeout, 124
        jobs[job_id] = {
            "started": time.monotonic(),
            "events": events,
            "duration": duration,
            "code": code,
            "cancelled_after": None,
            "serves": self._serves(argv),
        }
        directory = f"/run/sandhub/jobs/{job_id}"
        return {"job_id": job_id, "dir": directory, "log": f"{directory}/log", "pid": 1000}

    def _plan(self, box, argv, env) -> tuple[list[tuple[float, bytes]], float, int]:
        events, clock, code = [], 0.0, 0
        script = argv[2] if argv[:2] == ["bash", "-c"] else shlex.join(argv)
        for step in (s.strip() for s in script.split(";")):
            words = shlex.split(step) if step else []
            if not words:
                continue
            if words[0] == "sleep":
                clock += float(words[1])
                continue
            if words[0] == "exit":
                code = int(words[1])
                break
            if words[0] == "serve":
                continue
            out, err, code, _ = self._interpret(box, ["bash", "-c", step], env, 1e9)
            events.append((clock, out + err))
        return events, clock, code

    @staticmethod
    def _serves(argv) -> set[int]:
        script = argv[2] if argv[:2] == ["bash", "-c"] else shlex.join(argv)
        steps = (shlex.split(step) for step in script.split(";") if step.strip())
        return {int(words[1]) for words in steps if words[0] == "serve"}

    @staticmethod
    def _job_running(record: dict[str, Any]) -> bool:
        now = time.monotonic() - record["started"]
        end = record["duration"]
        if record["cancelled_after"] is not None:
            end = min(end, record["cancelled_after"])
        return now < end

    def poll_background(self, state, job, tail_bytes) -> JobStatus:
        record = self._running_box(state).get("jobs", {}).get(job["job_id"])
        if record is None:
            raise BackendError(f"no job {job['job_id']}")
        now = time.monotonic() - record["started"]
        end, code = record["duration"], record["code"]
        if record["cancelled_after"] is not None and record["cancelled_after"] < end:
            end, code = record["cancelled_after"], 143
        log = b"".join(data for t, data in record["events"] if t <= min(now, end))
        running = now < end
        return JobStatus(
            running=running,
            exit_code=None if running else code,
            output=log[-tail_bytes:] if tail_bytes else b"",
            output_bytes=len(log),
            cancelled=record["cancelled_after"] is not None,
            elapsed_seconds=None if running else end,
        )

    def kill_command(self, state, marker) -> None:
        self._running_box(state)  # its commands end at once: nothing is ever left to kill

    def cancel_background(self, state, job) -> None:
        record = self._running_box(state).get("jobs", {}).get(job["job_id"])
        if record is not None and record["cancelled_after"] is None:
            elapsed = time.monotonic() - record["started"]
            if elapsed < record["duration"]:
                record["cancelled_after"] = elapsed

    def put_files(self, state, dest_dir, tar_stream):
        box = self._running_box(state)
        # bytes, or a file object as the services now pass (uploads stream from disk)
        data = tar_stream if isinstance(tar_stream, bytes | bytearray) else tar_stream.read()
        with tarfile.open(fileobj=io.BytesIO(data)) as archive:
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

    # list_dir: tests/fake_file_ops.py (folders too)

    # --- ports: a sandbox port is a loopback server the test started --------------------------
    # ports: sandbox port -> the loopback port of a server the test runs, listening in every
    # fake sandbox. apps: the same, but listening only in a sandbox where a background job
    # with a `serve PORT` step runs (an app that comes and goes with its job: deploy_app).
    # Any other port has nothing listening.
    ports: dict[int, int] = {}
    apps: dict[int, int] = {}

    def open_port(self, state, port, timeout=5.0) -> PortStream:
        box = self._box(state)
        target = self.ports.get(port)
        if target is None and port in self.apps:
            jobs = box.get("jobs", {}).values()
            if any(port in job["serves"] and self._job_running(job) for job in jobs):
                target = self.apps[port]
        if target is None:
            raise PortClosed(f"connection to 127.0.0.1:{port} refused")
        try:
            sock = socket.create_connection(("127.0.0.1", target), timeout=timeout)
        except ConnectionRefusedError as exc:
            raise PortClosed(f"connection to 127.0.0.1:{port} refused") from exc
        except OSError as exc:
            raise BackendError(f"could not connect to port {port}: {exc}") from exc
        return SocketPortStream(sock)

    def probe(self) -> ProbeResult:
        if self.host.name in self.down_hosts:
            return ProbeResult(healthy=False, error=f"{self.host.name} does not answer")
        return ProbeResult(
            healthy=True,
            cpu_percent=10.0,
            memory_percent=20.0,
            sandboxes_running=len(self.sandboxes),
        )

    # --- housekeeping and warm pool (tests/services/housekeeping/) ----------------------------
    # Host names whose "engine" does not answer; a claim fails with fail_claim when set.
    down_hosts: set[str] = set()
    fail_claim: str | None = None

    def list_managed(self) -> list[ManagedResource]:
        if self.host.name in self.down_hosts:
            raise BackendError(f"{self.host.name} does not answer")
        return [
            ManagedResource(
                kind="container",
                label_id=box["spec"].sandbox_id,
                name=key,
                created_at=box.get("created"),
                instance=box["spec"].labels.get(LABEL_INSTANCE, ""),
                pool=box["spec"].labels.get(LABEL_POOL) == "1",
                running=box["running"],
                state={"container_id": key},
            )
            for key, box in self.sandboxes.items()
        ] + self.managed_snapshots()

    def provision_pool_member(self, spec: SandboxSpec) -> dict[str, Any]:
        state = self.provision(replace(spec, labels={**spec.labels, LABEL_POOL: "1"}))
        return {**state, "pool_id": spec.sandbox_id}

    def claim_pool_member(self, state: dict[str, Any], spec: SandboxSpec) -> dict[str, Any]:
        if self.fail_claim:
            raise BackendError(self.fail_claim)
        box = self._box(state)
        box["limits"] = (spec.cpus, spec.memory_mb, spec.pids_limit)
        box["claimed_by"] = spec.sandbox_id
        return dict(state)
