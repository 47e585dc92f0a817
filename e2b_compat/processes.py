"""E2B's processes on Sandhub's commands.

A process E2B's SDK starts (Process/Start) is a Sandhub command (services.run_command: recorded
in the history, audited, quota-checked, killed at its timeout) run in a thread of this web
process; its pid is the command's history id. Its events (start, output, end) go to the
stream that started it and to any Connect that follows it here; they are kept in memory
(bounded) until a while after it ended. The command does not depend on the stream: a client
that disconnects leaves it running, as envd does.

A process started with stdin reads what SendInput writes (a StdinPipe the registry holds,
pumped by the sandbox agent) until CloseStdin: input goes to the web process running it.
From another web process: SendSignal works anywhere (services.kill_command finds the command's
processes by the marker in its row), List reads the history, and Connect to a command running
elsewhere waits for its end and gives its recorded output then.
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from django.conf import settings

from e2b_compat.proto import process_pb2 as pb
from sandboxes import services
from sandboxes.contract.errors import ServiceError
from sandboxes.http.dbthreads import with_fresh_connection
from tenants.principal import Principal

__all__ = ["Process", "command_of", "find", "start"]

KEEP_EVENTS_BYTES = 4 * 1024 * 1024  # output a late Connect can still replay, per process
FORGET_AFTER = 300.0  # seconds an ended process's events stay for a Connect

_lock = threading.Lock()
_processes: dict[int, Process] = {}


@dataclass
class Process:
    """One started process: its events so far and the streams following it."""

    sandbox_id: str
    config: pb.ProcessConfig
    tag: str | None
    pid: int = 0
    events: list[pb.ProcessEvent] = field(default_factory=list)
    kept_bytes: int = 0
    ended_at: float | None = None
    followers: list[tuple[asyncio.AbstractEventLoop, asyncio.Queue[pb.ProcessEvent]]] = field(
        default_factory=list
    )
    started: threading.Event = field(default_factory=threading.Event)
    failure: ServiceError | None = None  # refused before it started: no pid, no events
    stdin: services.StdinPipe | None = None  # started with stdin: SendInput writes here

    def publish(self, event: pb.ProcessEvent) -> None:
        """Keep the event (within KEEP_EVENTS_BYTES of output) and hand it to every follower."""
        with _lock:
            size = len(event.data.stdout) + len(event.data.stderr)
            if not size or self.kept_bytes + size <= KEEP_EVENTS_BYTES:
                self.events.append(event)
                self.kept_bytes += size
            followers = list(self.followers)
        for loop, queue in followers:
            with contextlib.suppress(RuntimeError):  # its loop closed: nobody listens there
                loop.call_soon_threadsafe(queue.put_nowait, event)

    async def follow(self, replay: bool) -> AsyncIterator[pb.ProcessEvent]:
        """Its events from now on (replay: from its start), to its end."""
        queue: asyncio.Queue[pb.ProcessEvent] = asyncio.Queue()
        loop = asyncio.get_running_loop()
        with _lock:
            backlog = list(self.events) if replay else [e for e in self.events[:1]]
            self.followers.append((loop, queue))
            ended = self.ended_at is not None
        try:
            for event in backlog:
                yield event
            if ended:
                if not replay and self.events:
                    yield self.events[-1]
                return
            while True:
                event = await queue.get()
                yield event
                if event.WhichOneof("event") == "end":
                    return
        finally:
            with _lock, contextlib.suppress(ValueError):
                self.followers.remove((loop, queue))


def command_of(config: pb.ProcessConfig) -> str:
    """The shell command a ProcessConfig runs. E2B's SDKs send `/bin/bash -l -c COMMAND`;
    anything else runs as its argv, quoted."""
    args = list(config.args)
    if config.cmd in ("/bin/bash", "bash", "/bin/sh", "sh") and args[:1] in (["-c"], ["-l"]):
        flags = args[: args.index("-c") + 1] if "-c" in args else []
        if flags and set(flags) <= {"-l", "-c"} and len(args) == len(flags) + 1:
            return args[-1]
    return shlex.join([config.cmd, *args])


def start(
    principal: Principal,
    sandbox_id: str,
    request: pb.StartRequest,
    timeout: float | None,
) -> Process:
    """Start the process in a thread; returns once its pid is known (or it failed first:
    then its only event is its end, with the refusal as error)."""
    config = request.process
    process = Process(sandbox_id, config, request.tag if request.HasField("tag") else None)
    if request.stdin:
        process.stdin = services.StdinPipe()
    thread = threading.Thread(
        target=with_fresh_connection,
        args=(_run, principal, process, timeout),
        name=f"e2b-process-{sandbox_id}",
        daemon=True,
    )
    thread.start()
    process.started.wait()
    return process


def _run(principal: Principal, process: Process, timeout: float | None) -> None:
    config = process.config

    def on_start(command_id: int) -> None:
        process.pid = command_id
        with _lock:
            _processes[command_id] = process
        process.publish(pb.ProcessEvent(start=pb.ProcessEvent.StartEvent(pid=command_id)))
        process.started.set()

    def on_output(stream: str, chunk: bytes) -> None:
        data = pb.ProcessEvent.DataEvent(**{"stdout" if stream == "stdout" else "stderr": chunk})
        process.publish(pb.ProcessEvent(data=data))

    try:
        result = services.run_command(
            principal,
            process.sandbox_id,
            command_of(config),
            cwd=config.cwd if config.HasField("cwd") else "/workspace",
            env=dict(config.envs),
            timeout=timeout,
            on_output=on_output,
            on_start=on_start,
            stdin_pipe=process.stdin,
        )
        end = _end_of(result.status, result.exit_code, result.error_message)
    except ServiceError as exc:
        end = pb.ProcessEvent.EndEvent(
            exit_code=-1, exited=False, status="error", error=exc.message
        )
        if not process.pid:
            process.failure = exc
    except Exception as exc:  # the stream must end: the client would wait forever
        end = _failed(str(exc))
    finally:
        process.started.set()
    process.ended_at = time.monotonic()
    process.publish(pb.ProcessEvent(end=end))
    _forget_old()


def _end_of(status: str, exit_code: int | None, message: str) -> pb.ProcessEvent.EndEvent:
    if exit_code is None:  # killed by its timeout or lost with its sandbox
        return pb.ProcessEvent.EndEvent(
            exit_code=-1, exited=False, status=status, error=message or status
        )
    end = pb.ProcessEvent.EndEvent(
        exit_code=exit_code, exited=True, status=f"exit status {exit_code}"
    )
    if message:
        end.error = message
    return end


def _failed(message: str) -> pb.ProcessEvent.EndEvent:
    return pb.ProcessEvent.EndEvent(exit_code=-1, exited=False, status="error", error=message)


def find(pid: int) -> Process | None:
    with _lock:
        return _processes.get(pid)


def running_here(sandbox_id: str) -> list[Process]:
    with _lock:
        return [p for p in _processes.values() if p.sandbox_id == sandbox_id and p.ended_at is None]


def _forget_old() -> None:
    now = time.monotonic()
    with _lock:
        for pid, process in list(_processes.items()):
            if process.ended_at is not None and now - process.ended_at > FORGET_AFTER:
                del _processes[pid]


def process_timeout() -> float:
    """How long a process may run: the platform's maximum for a command. E2B's `timeout`
    (the stream's Connect-Timeout-Ms) bounds the client's stream, not the process: a
    background process outlives the stream it was started on, as in envd, and the client
    ends its own stream at its deadline."""
    return float(settings.SANDHUB_MAX_TIMEOUT_SECONDS)
