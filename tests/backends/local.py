"""A third kind of host, built only from the shared parts (docs/backends.md): sandboxes as
directories of this machine, their processes children of the platform process, as its user.

No isolation at all, so it is a test kind, never registered in settings: it proves that a
kind supplies only an AgentPlace (how the agent starts: here a child process over pipes) and
a PlainExec (how one command runs: a child process), and gets commands, background jobs,
listings, file reads and writes, sync and the choice between the agent and the per-command
path from agentfirst.py, agent/ and fallback/.
"""

from __future__ import annotations

import io
import os
import posixpath
import selectors
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from typing import IO, Any

from hosts.backends.agent.client import AgentClient, AgentStartFailed, AgentUnavailable
from hosts.backends.agent.jobs import AgentJobs
from hosts.backends.agent.link import AgentLink, Started
from hosts.backends.agent.transports import PipeTransport
from hosts.backends.agentfirst import AgentFirstBackend
from hosts.backends.base import BackendError, ProbeResult, SandboxGone, SandboxSpec
from hosts.backends.fallback.commands import PlainCommands
from hosts.backends.fallback.jobs import PlainJobs
from hosts.backends.fallback.primitive import Deadline, Output

WORKSPACE = "/workspace"


class LocalPlace:
    """The sandbox's directory: `/workspace` is its workspace/, jobs live in .sandhub/jobs."""

    def __init__(self, python: str = sys.executable) -> None:
        self.python = python

    def key(self, state: dict[str, Any]) -> str | None:
        return str(state["dir"])

    def start(self, state: dict[str, Any]) -> Started:
        self.after_missing(state)
        try:
            transport = PipeTransport(self.python, cwd=state["dir"])
        except FileNotFoundError as exc:
            raise AgentUnavailable(f"no {self.python} on this machine") from exc
        try:
            return Started(AgentClient(transport, label=state["sandbox_id"]))
        except AgentStartFailed as exc:
            raise BackendError(f"the agent did not start: {exc.said}") from exc

    def after_broken(self, state: dict[str, Any], context: Any) -> None:
        self.after_missing(state)

    def after_missing(self, state: dict[str, Any]) -> None:
        if not os.path.isdir(state["workspace"]):
            raise SandboxGone(f"sandbox {state['sandbox_id']} no longer exists")

    def host_path(self, state: dict[str, Any], path: str) -> str:
        path = posixpath.normpath(posixpath.join(WORKSPACE, path))
        if path == WORKSPACE or path.startswith(WORKSPACE + "/"):
            return state["workspace"] + path[len(WORKSPACE) :]
        return path

    def sandbox_path(self, state: dict[str, Any], path: str) -> str:
        workspace = state["workspace"]
        if path == workspace or path.startswith(workspace + "/"):
            return WORKSPACE + path[len(workspace) :]
        return path

    def environment(self, state: dict[str, Any], env: dict[str, str]) -> dict[str, str]:
        return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **env}

    def write_root(self, state: dict[str, Any]) -> str:
        return str(state["workspace"])

    def job_dir(self, state: dict[str, Any], job_id: str) -> str:
        return f"{state['dir']}/.sandhub/jobs/{job_id}"


class LocalPlainExec:
    """One child process per call."""

    max_stdin: int | None = None

    def run(
        self,
        state: dict[str, Any],
        argv: list[str],
        *,
        env: dict[str, str],
        stdin: bytes | None,
        deadline: float,
        output: Output,
        cwd: str | None = None,
    ) -> int | None:
        environment = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **env}
        process = subprocess.Popen(
            argv,
            cwd=cwd or state["dir"],
            env=environment,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert process.stdin and process.stdout and process.stderr
        process.stdin.write(stdin or b"")
        process.stdin.close()
        with selectors.DefaultSelector() as selector:
            selector.register(process.stdout, selectors.EVENT_READ, "stdout")
            selector.register(process.stderr, selectors.EVENT_READ, "stderr")
            while selector.get_map():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    process.stdout.close()
                    process.stderr.close()
                    raise Deadline
                for key, _ in selector.select(remaining):
                    chunk = os.read(key.fd, 65536)
                    if chunk:
                        output(key.data, chunk)
                    else:
                        selector.unregister(key.fileobj)
        return process.wait()


class LocalBackend(AgentFirstBackend):
    kind = "local"

    def __init__(self, host: Any, python: str = sys.executable) -> None:
        super().__init__(host)
        self.base_dir = tempfile.mkdtemp(prefix="sandhub-local-")
        self.place = LocalPlace(python)
        self.agents = AgentLink(self.place)
        self.agent_jobs = AgentJobs(self.agents)
        self.plain = PlainCommands(LocalPlainExec(), self.place)
        self.plain_jobs = PlainJobs(self.plain)

    def provision(self, spec: SandboxSpec) -> dict[str, Any]:
        directory = os.path.join(self.base_dir, spec.sandbox_id)
        os.makedirs(os.path.join(directory, "workspace"))
        os.makedirs(os.path.join(directory, ".sandhub", "jobs"))
        workspace = os.path.join(directory, "workspace")
        return {"sandbox_id": spec.sandbox_id, "dir": directory, "workspace": workspace}

    def destroy(self, state: dict[str, Any]) -> None:
        self.agents.forget(state)
        shutil.rmtree(state["dir"], ignore_errors=True)

    def status(self, state: dict[str, Any]) -> str:
        return "running" if os.path.isdir(state["dir"]) else "missing"

    def put_files(
        self, state: dict[str, Any], dest_dir: str, tar_stream: bytes | IO[bytes]
    ) -> None:
        source = io.BytesIO(tar_stream) if isinstance(tar_stream, bytes) else tar_stream
        with tarfile.open(fileobj=source, mode="r|*") as archive:
            archive.extractall(self.place.host_path(state, dest_dir), filter="data")

    def get_files(self, state: dict[str, Any], path: str) -> Iterator[bytes]:
        buffer = io.BytesIO()
        host = self.place.host_path(state, path)
        with tarfile.open(fileobj=buffer, mode="w") as archive:
            archive.add(host, arcname=posixpath.basename(host))
        return iter([buffer.getvalue()])

    def probe(self) -> ProbeResult:
        return ProbeResult(healthy=os.path.isdir(self.base_dir))

    def close(self) -> None:
        self.agents.close()
        shutil.rmtree(self.base_dir, ignore_errors=True)
