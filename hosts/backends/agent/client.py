"""The platform's side of the sandbox agent: one AgentClient per running agent.

An AgentClient owns a transport (a duplex byte stream to the agent's stdin and stdout: a
Docker exec socket, a local pipe), sends the agent's source first, and waits for its HELLO.
A reader thread then dispatches frames to the calls in flight; any number of threads may
call at once. Memory stays bounded: live output goes straight to the caller's callback,
kept output is at most the cap, and inbound data to the agent is sent within a window the
agent acknowledges (CREDIT); a port stream's data both ways within windows (ports.py).

Timeouts have two layers: the agent kills a command at its timeout, and the caller keeps its
own deadline on top (timeout + kill_after + CLIENT_GRACE). A call whose deadline passes is
cancelled; if the agent does not answer that either, it is taken for stuck and dropped.

If the stream breaks, every call in flight fails with AgentBroken (a BackendError) and the
client is dead for good: whoever holds it (agent_link) starts a new agent on the next call.
"""

from __future__ import annotations

import json
import logging
import struct
import threading
import time
import uuid
from collections.abc import Callable
from functools import partial
from typing import IO, Any

from hosts.backends.agent import calls, protocol
from hosts.backends.agent.calls import (
    AgentBroken,
    AgentStartFailed,
    AgentUnreached,
    Call,
    Collect,
    ExecCall,
    NotAFile,
    NothingSent,
)
from hosts.backends.agent.ports import AgentPortStream, port_request
from hosts.backends.agent.source import agent_source
from hosts.backends.agent.transports import Transport, input_chunks
from hosts.backends.base import BackendError, ExecResult, FileEntry, OutputCallback, PortStream
from hosts.backends.stdin import StdinPipe

__all__ = ["AgentBroken", "AgentClient", "AgentStartFailed", "AgentUnavailable"]
__all__ += ["AgentUnreached", "ExecCall", "NotAFile", "NothingSent", "Transport"]

logger = logging.getLogger(__name__)

START_TIMEOUT = 20.0  # from sending the source to the agent's HELLO
CALL_TIMEOUT = 60.0  # file operations, job starts, pings
KILL_AFTER = 2.0  # SIGTERM first; SIGKILL this long after (inside the sandbox)
# The caller's own deadline is timeout + kill_after + this: the agent's sweep after a timeout
# may take a while (procs.SWEEP_LIMIT) and must be able to report on its own.
CLIENT_GRACE = 12.0
LIVE_MINIMUM = 1024 * 1024  # live output a stream (at least the cap), when a callback wants it


class AgentUnavailable(BackendError):
    """The agent cannot run in this sandbox (no python3 in the image): use the per-command
    exec path instead."""


class AgentClient:
    """One running agent. Thread-safe; dead for good once its stream breaks."""

    def __init__(
        self, transport: Transport, *, label: str = "", start_timeout: float = START_TIMEOUT
    ) -> None:
        self.label = label
        self.info: dict[str, Any] = {}
        self.abandoned = False  # dropped for not answering: it may still be there, stuck
        self.closed = False  # closed by the platform: the agent stops its commands itself
        self._transport = transport
        self._send_lock = threading.Lock()
        self._lock = threading.Lock()
        self._calls: dict[int, Call] = {}
        self._next_id = 0
        self._dead: AgentBroken | None = None
        self._hello = threading.Event()
        self._early = bytearray()  # the stream's first bytes, if they were no HELLO
        source = agent_source()
        refused = ""
        try:
            transport.sendall(len(source).to_bytes(4, "big") + source)
        except OSError as exc:  # no agent took it; what the other side said is still read
            refused = f" (sending its source failed: {exc})"
        self._reader = threading.Thread(
            target=self._read_loop, name=f"sandhub-agent-{label}", daemon=True
        )
        self._reader.start()
        if not self._hello.wait(start_timeout) or self._dead is not None:
            reason = self._dead or f"no answer within {start_timeout:g} s"
            self._die(f"the sandbox agent did not start: {reason}{refused}")
            raise AgentStartFailed(str(self._dead), said=transport.said(), early=bytes(self._early))

    # --- state ---------------------------------------------------------------------------------
    @property
    def alive(self) -> bool:
        return self._dead is None

    @property
    def pid(self) -> int | None:
        return self.info.get("pid")

    @property
    def inflight(self) -> int:  # calls in flight: an open port stream is one
        with self._lock:
            return len(self._calls)

    def close(self) -> None:
        """Drop the agent: calls in flight fail, and the agent stops their commands."""
        self.closed = True
        self._die("the platform closed the agent's stream")

    # --- operations ----------------------------------------------------------------------------
    def ping(self, timeout: float = 5.0) -> dict[str, Any]:
        return self._call({"op": "ping"}, lambda rid: Call(self, rid), timeout).body

    def start_exec(
        self,
        argv: list[str],
        *,
        cwd: str,
        env: dict[str, str],
        timeout: float,
        output_cap: int,
        on_output: OutputCallback | None = None,
        stdin: bytes | StdinPipe | None = None,
        kill_after: float = KILL_AFTER,
        live_limit: int | None = None,
        marker: str | None = None,
        grace: float | None = None,
    ) -> ExecCall:
        """Start argv in the sandbox; wait() on the answer. on_output(stream, chunk) is called
        from the reader thread as output comes (up to live_limit bytes a stream): it must
        not block, as the MCP and web pumps do not."""
        if not argv:
            raise BackendError("empty command")
        if timeout <= 0:
            raise BackendError("timeout must be positive")
        marker = marker or uuid.uuid4().hex
        live = 0 if on_output is None else live_limit or max(output_cap, LIVE_MINIMUM)
        body = {
            "op": "exec",
            "argv": list(argv),
            "cwd": cwd,
            "env": dict(env),
            "timeout": timeout,
            "kill_after": kill_after,
            "cap": output_cap,
            "live": live,
            "marker": marker,
            "stdin": stdin is not None,
        }
        deadline = (
            time.monotonic() + timeout + kill_after + (CLIENT_GRACE if grace is None else grace)
        )

        def make(rid: int) -> ExecCall:
            return ExecCall(self, rid, output_cap, on_output, marker, deadline)

        call = self._open(body, make)
        if isinstance(stdin, StdinPipe):
            # Input as it comes: pumped by a thread of its own, so the command runs (and its
            # output flows) meanwhile; the caller closes the pipe when the call has ended.
            threading.Thread(
                target=self._pump, args=(call, stdin, deadline), daemon=True, name="agent-stdin"
            ).start()
        elif stdin is not None:
            self._stream(call, stdin, deadline)
        return call

    def _pump(self, call: Call, pipe: StdinPipe, deadline: float) -> None:
        try:
            self._stream(call, pipe, deadline)
        except AgentBroken:
            pass  # the call fails with it, and says why
        finally:
            pipe.close()  # a writer after the end is told so

    def exec(
        self,
        argv: list[str],
        *,
        cwd: str,
        env: dict[str, str],
        timeout: float,
        output_cap: int,
        on_output: OutputCallback | None = None,
        stdin: bytes | StdinPipe | None = None,
        kill_after: float = KILL_AFTER,
        live_limit: int | None = None,
        marker: str | None = None,
    ) -> ExecResult:
        """start_exec(...).wait(): the same ExecResult as SandboxBackend.exec."""
        call = self.start_exec(
            argv,
            cwd=cwd,
            env=env,
            timeout=timeout,
            output_cap=output_cap,
            on_output=on_output,
            stdin=stdin,
            kill_after=kill_after,
            live_limit=live_limit,
            marker=marker,
        )
        return call.wait()

    def kill_marked(self, marker: str, timeout: float = CALL_TIMEOUT) -> bool:
        """Kill every process carrying the exec marker (a command whose agent died)."""
        body = {"op": "kill_marked", "marker": marker}
        return bool(self._call(body, lambda rid: Call(self, rid), timeout).body["swept"])

    def kill_agent(self, pid: int, timeout: float = CALL_TIMEOUT) -> bool:
        """SIGKILL to another agent of the sandbox (one that stopped answering)."""
        body = {"op": "kill_agent", "pid": pid}
        return bool(self._call(body, lambda rid: Call(self, rid), timeout).body["killed"])

    def read_file(
        self, path: str, *, offset: int = 0, length: int, timeout: float = CALL_TIMEOUT
    ) -> tuple[int, bytes]:
        """(size of the file, up to `length` bytes from `offset`), read as the sandbox user.
        FileNotFoundError, PermissionError, NotAFile (not a regular file)."""
        body = {"op": "read", "path": path, "offset": offset, "length": length}
        call = self._call(body, lambda rid: Collect(self, rid, protocol.CH_FILE, length), timeout)
        assert isinstance(call, Collect)
        return int(call.body["size"]), bytes(call.buffer)

    def write_file(
        self,
        path: str,
        content: bytes | IO[bytes],
        *,
        mode: int = 0o644,
        root: str = "/workspace",
        timeout: float = CALL_TIMEOUT,
    ) -> int:
        """Write path (under root) atomically; its size. NotADirectoryError (a link or a file
        where a directory goes), FileExistsError (a directory where the file goes),
        PermissionError."""
        deadline = time.monotonic() + timeout
        body = {"op": "write", "path": path, "mode": mode, "root": root}
        call = self._open(body, lambda rid: Call(self, rid))
        self._stream(call, content, deadline)
        return int(call.wait_body(deadline)["size"])

    def list_dir(self, path: str, timeout: float = CALL_TIMEOUT) -> list[FileEntry]:
        """Entries of a directory, or the one entry of a file, as FileEntry."""
        body = {"op": "list", "path": path}
        call = self._call(body, lambda rid: Collect(self, rid, protocol.CH_ENTRIES), timeout)
        assert isinstance(call, Collect)
        return [calls.file_entry(row) for part in call.parts for row in json.loads(part)]

    def start_job(
        self,
        job_id: str,
        directory: str,
        argv: list[str],
        env: dict[str, str],
        timeout: float = CALL_TIMEOUT,
    ) -> int:
        """Start a background job's runner detached; its pid (= its session id)."""
        body = {"op": "job_start", "job_id": job_id, "dir": directory, "argv": argv, "env": env}
        return int(self._call(body, lambda rid: Call(self, rid), timeout).body["pid"])

    def cancel_job(
        self, job_id: str, directory: str, sid: int | None, term: float, timeout: float
    ) -> bool:
        """Cancel a background job (SIGTERM, SIGKILL after `term` s); whether all is gone."""
        body = {"op": "job_cancel", "job_id": job_id, "dir": directory, "sid": sid, "term": term}
        return bool(self._call(body, lambda rid: Call(self, rid), timeout).body["done"])

    def open_port(self, port: int, timeout: float = 5.0) -> PortStream:
        """A stream to the sandbox's own listener on the port (ports.py); PortClosed."""
        stream = self._open(port_request(port, timeout), partial(AgentPortStream, self, port=port))
        stream.wait_open(timeout)
        return stream

    # --- calls ---------------------------------------------------------------------------------
    def _call(self, body: dict[str, Any], make: Callable[[int], Call], timeout: float) -> Call:
        call = self._open(body, make)
        call.wait_body(time.monotonic() + timeout)
        return call

    def _open(self, body: dict[str, Any], make: Callable[[int], Any]) -> Any:
        """Send a request; AgentUnreached if it never left (the agent is dead already, or its
        stream refused the first byte): the caller may try it again on a new agent."""
        with self._lock:
            if self._dead is not None:
                raise AgentUnreached(str(self._dead))
            self._next_id = self._next_id % 0xFFFFFFFF + 1
            call = make(self._next_id)
            self._calls[call.rid] = call
        try:
            self._send(protocol.control(call.rid, protocol.REQUEST, body))
        except AgentBroken as broken:
            if isinstance(broken.__cause__, NothingSent):
                raise AgentUnreached(str(broken)) from broken.__cause__
            raise
        return call

    def _stream(self, call: Call, content: bytes | IO[bytes] | StdinPipe, deadline: float) -> None:
        """Send content on CH_STDIN within the agent's window, then EOF; stops early if the
        call ends (the agent refused, or the command ended without reading it all)."""
        for chunk in input_chunks(content):
            if not call.reserve(len(chunk), deadline):
                return
            self._send(protocol.data(call.rid, protocol.CH_STDIN, chunk))
        if not call.done.is_set():  # a pipe closed after the command ended: nothing to end
            self._send(protocol.frame(call.rid, protocol.EOF, bytes((protocol.CH_STDIN,))))

    def cancel(self, rid: int) -> None:
        with self._lock:
            if rid not in self._calls or self._dead is not None:
                return
        self._send(protocol.frame(rid, protocol.CANCEL))

    def send_frame(self, packet: bytes) -> None:
        """One frame to the agent (a port stream's data, ACK, EOF); AgentBroken if it fails."""
        self._send(packet)

    def _send(self, packet: bytes) -> None:
        try:
            with self._send_lock:
                self._transport.sendall(packet)
        except OSError as exc:
            self._die(f"writing to the sandbox agent failed: {exc}")
            raise AgentBroken(str(self._dead)) from exc

    def abandon(self, reason: str) -> None:
        """The agent does not answer: drop it (the next call starts a new one)."""
        logger.warning("sandbox agent %s abandoned: %s", self.label, reason)
        self.abandoned = True
        self._die(reason)

    # --- the reader ----------------------------------------------------------------------------
    def _read_loop(self) -> None:
        reader = protocol.FrameReader()
        reason = "the sandbox agent's stream ended"
        try:
            while True:
                chunk = self._transport.recv()
                if not chunk:
                    break
                if not self._hello.is_set() and len(self._early) < 4096:
                    self._early += chunk[: 4096 - len(self._early)]
                for rid, kind, payload in reader.feed(chunk):
                    self._dispatch(rid, kind, payload)
        except Exception as exc:
            reason = f"reading the sandbox agent's stream failed: {exc}"
        self._die(reason)

    def _dispatch(self, rid: int, kind: int, payload: bytes) -> None:
        if rid == 0:
            body = json.loads(payload)
            if kind == protocol.HELLO:
                if body.get("version") != protocol.VERSION:
                    raise ValueError(f"agent protocol version {body.get('version')}")
                self.info = body
                self._early.clear()
                self._hello.set()
            elif kind == protocol.ERROR:
                raise ValueError(f"the agent stopped: {body.get('message')}")
            return
        with self._lock:
            call = self._calls.get(rid)
            if call is not None and kind in (protocol.RESULT, protocol.ERROR):
                del self._calls[rid]
        if call is None:
            return  # a call given up on
        if kind == protocol.DATA:
            call.on_data(payload[0], payload[1:])
        elif kind == protocol.CREDIT:
            call.on_credit(struct.unpack("!I", payload)[0])
        elif kind == protocol.RESULT:
            call.finish(json.loads(payload))
        elif kind == protocol.ERROR:
            call.fail(calls.refusal(json.loads(payload)))

    def _die(self, reason: str) -> None:
        with self._lock:
            if self._dead is not None:
                return
            said = self._transport.said()
            self._dead = AgentBroken(f"{reason}; it said: {said[-600:]}" if said else reason)
            pending = list(self._calls.values())
            self._calls.clear()
        for call in pending:
            call.fail(self._dead)
        self._hello.set()
        try:
            self._transport.close()
        except Exception:  # closing a broken stream: nothing left to save
            logger.debug("closing the stream of agent %s", self.label, exc_info=True)
