"""The agent: reads frames, runs requests on the worker pool (part 6, the last, of the agent).

Run by protocol.BOOTSTRAP as `__sandhub_agent__`. At the end of its input (the platform
closed the stream, or went away) it stops every command still running, since nobody waits
for them and nobody else would enforce their timeouts, and exits; background jobs stay.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from .command import Command
from .constants import (
    ACK,
    CANCEL,
    CHUNK,
    DATA,
    EOF,
    ERR_INTERNAL,
    ERR_INVALID,
    ERROR,
    HEADER,
    HELLO,
    MAX_PAYLOAD,
    REQUEST,
    RESULT,
    VERSION,
)
from .files import (
    op_job_cancel,
    op_job_start,
    op_kill_agent,
    op_kill_marked,
    op_list,
    op_read,
    op_write,
)
from .guard import LIBC, guard_streams, keep_to_itself
from .ports import op_port
from .procs import SWEEP_LIMIT
from .sync import op_manifest, op_remove
from .terminals import op_terminal_attach, op_terminal_close, op_terminal_list, op_terminal_open
from .wire import Pool, Reaper, Refusal, Request, Wire


class Agent:
    def __init__(self, in_fd: int, out_fd: int, private: bool = False) -> None:
        self.in_fd, self.wire, self.private = in_fd, Wire(out_fd), private
        self.base_env = dict(os.environ)  # the sandbox's environment, for every command
        self.requests: dict[int, Request] = {}
        self.lock = threading.Lock()
        self.reaper = Reaper()
        self.subreaper = set_process_options()
        threading.Thread(target=self.reaper.run, daemon=True).start()
        self.pool = Pool()
        self.ops: dict[str, Callable[[Request], dict[str, Any]]] = {
            "exec": lambda request: Command(request, self.reaper, self.base_env).run(),
            "job_start": lambda request: op_job_start(request, self.reaper, self.base_env),
            "job_cancel": op_job_cancel,
            "kill_agent": op_kill_agent,
            "kill_marked": op_kill_marked,
            "list": op_list,
            "manifest": op_manifest,
            "port": op_port,
            "read": op_read,
            "remove": op_remove,
            "write": op_write,
            "terminal_open": lambda request: op_terminal_open(request, self.reaper, self.base_env),
            "terminal_attach": op_terminal_attach,
            "terminal_close": op_terminal_close,
            "terminal_list": op_terminal_list,
        }

    def serve(self) -> None:
        hello = {"version": VERSION, "pid": os.getpid(), "python": sys.version.split()[0]}
        hello["subreaper"] = self.subreaper
        hello["private"] = self.private  # not dumpable: its streams are closed to commands
        self.wire.send([self.wire.control(0, HELLO, hello)])
        buffer = bytearray()
        while True:
            chunk = os.read(self.in_fd, CHUNK)
            if not chunk:
                break
            buffer += chunk
            while len(buffer) >= HEADER.size:
                length, rid, kind = HEADER.unpack_from(buffer)
                if length > MAX_PAYLOAD:  # the stream is corrupt: nothing after can be trusted
                    body = {"kind": ERR_INVALID, "message": f"a frame of {length} bytes came"}
                    self.wire.send([self.wire.control(0, ERROR, body)])
                    self.shutdown()
                if len(buffer) < HEADER.size + length:
                    break
                payload = bytes(buffer[HEADER.size : HEADER.size + length])
                del buffer[: HEADER.size + length]
                self.dispatch(rid, kind, payload)
        self.shutdown()

    def dispatch(self, rid: int, kind: int, payload: bytes) -> None:
        with self.lock:
            request = self.requests.get(rid)
        if kind == REQUEST and request is None:
            try:
                args = json.loads(payload.decode())
                op = str(args["op"])
            except (ValueError, KeyError, TypeError):
                args, op = {}, ""
            if op == "ping":  # answered here: it must work when no thread can be made
                answer = {"pid": os.getpid(), "inflight": len(self.requests)}
                self.wire.send([self.wire.control(rid, RESULT, answer)])
                return
            request = Request(self.wire, rid, args)
            with self.lock:
                self.requests[rid] = request
            handler = self.ops.get(op)
            self.pool.submit(lambda: self.run(request, handler))
        elif request is None:
            return  # data or a cancel for a request that has ended already
        elif kind == DATA:
            request.push(payload[1:])
        elif kind == EOF:
            request.end_input()
        elif kind == CANCEL:
            request.cancel()
        elif kind == ACK and len(payload) == 4:
            request.ack(int.from_bytes(payload, "big"))

    def run(self, request: Request, handler: Callable[[Request], dict[str, Any]] | None) -> None:
        try:
            if handler is None:
                raise Refusal(ERR_INVALID, f"unknown operation {request.args.get('op')!r}")
            body = handler(request)  # first: it may fill the outbox
            packets = [*request.outbox, self.wire.control(request.rid, RESULT, body)]
        except Refusal as exc:
            body = {"kind": exc.kind, "message": exc.message}
            packets = [self.wire.control(request.rid, ERROR, body)]
        except Exception as exc:  # a bug here must end the request, never the agent
            body = {"kind": ERR_INTERNAL, "message": f"{type(exc).__name__}: {exc}"}
            packets = [self.wire.control(request.rid, ERROR, body)]
        with self.lock:
            self.requests.pop(request.rid, None)
        with contextlib.suppress(OSError):  # the platform is gone: the main thread sees
            self.wire.send(packets)  # the end of its input

    def shutdown(self) -> None:
        with self.lock:
            pending = list(self.requests.values())
        for request in pending:
            request.cancel()
        give_up = time.monotonic() + SWEEP_LIMIT + 5.0
        while self.requests and time.monotonic() < give_up:
            time.sleep(0.01)
        os._exit(0)


def set_process_options() -> bool:
    """Become a child subreaper, so orphans of commands come back to the agent (and are
    reaped here); name the process. True if the agent is a subreaper."""
    if LIBC is None:  # no ctypes in this python: orphans go to the container's init
        return False
    LIBC.prctl(15, b"sandhub-agent", 0, 0, 0)  # PR_SET_NAME
    return bool(LIBC.prctl(36, 1, 0, 0, 0) == 0)  # PR_SET_CHILD_SUBREAPER


def main() -> None:
    # First: nothing of the sandbox's may look into the agent (guard.py). BOOTSTRAP did it
    # already where it could; this says whether it holds.
    private = keep_to_itself()
    # Frames travel on private copies of stdin and stdout (close-on-exec, as os.dup makes
    # them); fds 0 and 1 become /dev/null, so nothing else written there (a stray print, a
    # library's warning) can corrupt them.
    in_fd, out_fd = os.dup(0), os.dup(1)
    guard_streams(in_fd, out_fd)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    threading.stack_size(512 * 1024)
    Agent(in_fd, out_fd, private).serve()


if __name__ == "__sandhub_agent__":  # run as the bundle (protocol.BOOTSTRAP)
    main()
