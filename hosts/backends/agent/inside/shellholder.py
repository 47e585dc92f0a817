"""A shell session's holder (after holder.py and ptyholder.py, in the holder's program).

One bash (sh where there is none) on pipes: its stdin is what the holder tells it to run, its
stdout the runs' statuses. A run (a client's `R`, shellclient.py) is a file of shell text and
three fifos in the holder's private directory; bash sources the file at its top level with
the fifos as stdin, stdout and stderr, so `cd`, variables, functions, aliases and options stay
for the next run; then it prints the run's number and `$?`. The holder carries the client's
stdin into one fifo and the other two back to it, framed.

A client that goes away before its run ends (its exec timed out or was cancelled) gets the
run's new processes killed (what is below the holder and was not there before the run,
bash excepted). If bash does not answer then (the run was its own loop, say), bash and all
below it are killed and a new one starts: the next run's stderr says the state was lost.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import shlex
import signal
import struct
import subprocess
import time
from typing import Any

from .holder import (
    ABORT_GRACE,
    FRAME,
    HIGH_WATER,
    OUT_EXIT,
    OUT_STDERR,
    OUT_STDOUT,
    POLL_GONE,
    POLL_IN,
    POLL_OUT,
    READ,
    Client,
    Holder,
    children_of,
    kill_below,
    opened_by,
    reap,
    status_code,
)

MAX_STDIN = 1024 * 1024  # client input waiting for the run before the client is not read
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class Run:
    """One command of the session, from its client's request to its status."""

    def __init__(self, client: Client, number: int, prefix: str) -> None:
        self.client, self.number, self.prefix = client, number, prefix
        self.fds: dict = {}  # fd -> OUT_STDOUT / OUT_STDERR
        self.stdin_fd = -1
        self.stdin = bytearray()
        self.stdin_done = False
        self.code = None  # the status, once bash said it
        self.done_at = 0.0
        self.before: set = set()


class Shell(Holder):
    kind = "shell"

    def start(self) -> None:
        self.queue: list = []
        self.run: Any = None  # the Run in progress
        self.number = 0
        self.note = ""  # said on the next run's stderr
        self.bash: Any = None  # its Popen
        self.spawn()

    def spawn(self) -> None:
        bash = next((p for p in ("/bin/bash", "/usr/bin/bash") if os.access(p, os.X_OK)), None)
        argv = [bash, "--noprofile", "--norc"] if bash else ["/bin/sh"]
        self.builtin = "builtin " if bash else ""
        cwd = self.cwd if os.path.isdir(self.cwd) else "/"
        self.bash = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd=cwd,
            env=self.env,
            start_new_session=True,
        )
        self.statuses = bytearray()
        self.bash_status: int | None = None
        if bash:
            self.bash.stdin.write(b"shopt -s expand_aliases\n")
            self.bash.stdin.flush()
        os.set_blocking(self.bash.stdout.fileno(), False)
        self.watch(self.bash.stdout.fileno(), POLL_IN, self.on_status)

    def respawn(self, why: str) -> None:
        self.unwatch(self.bash.stdout.fileno())
        kill_below(set())
        for stream in (self.bash.stdin, self.bash.stdout):
            with contextlib.suppress(OSError):
                stream.close()
        self.note = (
            f"sandhub: {why}; a new shell started: the session's state (cwd, variables, "
            "functions, aliases) was lost\n"
        )
        self.spawn()

    def reaped(self, done: list) -> None:
        for pid, status in done:
            if self.bash is not None and pid == self.bash.pid:
                self.bash_status = status_code(status)

    def attached(self) -> int:
        return 1 if self.run is not None else 0

    def busy(self) -> bool:
        return self.run is not None or bool(self.queue)

    def accepts(self, first: bytes) -> bool:
        return first == b"R"

    def take(self, client: Client, first: bytes) -> None:
        self.queue.append(client)
        self.watch(client.fd, POLL_IN, lambda ev: self.on_client(client, ev))
        self.next()

    def dropped(self, client: Client) -> None:
        if client in self.queue:
            self.queue.remove(client)

    # --- a run -------------------------------------------------------------------------------
    def next(self) -> None:
        """Start the first waiting client's run whose request is all there."""
        while self.run is None and self.queue:
            client = self.queue[0]
            if len(client.inbox) < 4:
                return
            length = struct.unpack_from("!I", client.inbox)[0]
            if len(client.inbox) < 4 + length:
                return
            self.queue.pop(0)
            try:
                request = json.loads(bytes(client.inbox[4 : 4 + length]).decode())
            except ValueError:
                self.drop(client)
                continue
            del client.inbox[: 4 + length]
            self.begin(client, request)

    def begin(self, client: Client, request: dict) -> None:
        self.number += 1
        prefix = f"{os.path.dirname(self.path)}/{self.config['id']}.{self.number}"
        run = Run(client, self.number, prefix)
        exports = "".join(
            f"export {name}={shlex.quote(str(value))}\n"
            for name, value in (request.get("env") or {}).items()
            if _NAME.match(str(name))
        )
        text = str(request.get("command") or "")
        with open(prefix + ".cmd", "w") as handle:
            handle.write(exports + text + ("" if text.endswith("\n") else "\n"))
        for suffix in (".in", ".out", ".err"):
            os.mkfifo(prefix + suffix, 0o600)
        # Read and write both: opening never waits for bash, and the holder's own write end
        # keeps a fifo from ever reading as ended; the run ends at its status, and what it
        # wrote before is in the fifo by then (drained: maybe_done).
        run.fds[os.open(prefix + ".out", os.O_RDWR | os.O_NONBLOCK)] = OUT_STDOUT
        run.fds[os.open(prefix + ".err", os.O_RDWR | os.O_NONBLOCK)] = OUT_STDERR
        run.stdin_fd = os.open(prefix + ".in", os.O_RDWR | os.O_NONBLOCK)
        run.before = set(children_of(os.getpid()))
        self.run = run
        for fd in run.fds:
            self.watch(fd, POLL_IN, lambda ev, fd=fd: self.on_output(fd, ev))
        if self.note:
            self.send(OUT_STDERR, self.note.encode())
            self.note = ""
        q = shlex.quote
        line = (
            f". {q(prefix + '.cmd')} <{q(prefix + '.in')} >{q(prefix + '.out')} "
            f"2>{q(prefix + '.err')}; {self.builtin}echo {run.number} $?\n"
        )
        try:
            self.bash.stdin.write(line.encode())
            self.bash.stdin.flush()
        except OSError:
            pass  # bash is gone: its status pipe says so
        self.on_client(client, POLL_IN)

    def send(self, kind: int, data: bytes) -> None:
        run = self.run
        run.client.out += FRAME.pack(kind, len(data)) + data
        if not run.client.flush():
            self.abort()
            return
        self.arm()

    def arm(self) -> None:
        """Poll what may move now: output while the client keeps up, its input while the
        run's stdin has room."""
        run = self.run
        if run is None:
            return
        full = len(run.client.out) > HIGH_WATER
        for fd in run.fds:
            self.poller.modify(fd, 0 if full else POLL_IN)
        mask = (POLL_IN if len(run.stdin) < MAX_STDIN else 0) | (POLL_OUT if run.client.out else 0)
        self.poller.modify(run.client.fd, mask)
        if run.stdin_fd >= 0 and run.stdin_fd in self.handlers:
            self.poller.modify(run.stdin_fd, POLL_OUT if run.stdin else 0)
        elif run.stdin_fd >= 0 and run.stdin:
            self.watch(run.stdin_fd, POLL_OUT, self.on_stdin)

    def on_client(self, client: Client, events: int) -> None:
        run = self.run
        if run is None or run.client is not client:  # waiting its turn: its request is read
            data = client.receive()
            if data is None:
                return
            if not data:
                self.drop(client)
                return
            self.next()
            return
        if events & POLL_OUT and not client.flush():
            self.abort()
            return
        if events & (POLL_IN | POLL_GONE) and client.receive() == b"":
            self.abort()  # the client is gone before its run ended
            return
        self.client_input(run)
        self.arm()

    def client_input(self, run: Run) -> None:
        """The client's frames: D (stdin data), E (end of stdin)."""
        inbox = run.client.inbox
        while len(inbox) >= FRAME.size and not run.stdin_done:
            kind, length = FRAME.unpack_from(inbox)
            if len(inbox) < FRAME.size + length:
                break
            run.stdin += inbox[FRAME.size : FRAME.size + length]
            del inbox[: FRAME.size + length]
            if kind == ord("E"):
                run.stdin_done = True
        self.on_stdin(POLL_OUT)

    def on_stdin(self, events: int) -> None:
        run = self.run
        if run is None or run.stdin_fd < 0:
            return
        if run.stdin:
            try:
                del run.stdin[: os.write(run.stdin_fd, run.stdin)]
            except (BlockingIOError, InterruptedError):
                pass
            except OSError:  # nobody reads it any more
                run.stdin.clear()
        if run.stdin_done and not run.stdin:
            if not opened_by(self.bash.pid, run.prefix + ".in"):
                return  # bash has not opened it yet: closing now would leave it waiting
            self.unwatch(run.stdin_fd)
            os.close(run.stdin_fd)
            run.stdin_fd = -1

    def on_output(self, fd: int, events: int) -> bool:
        """Pass on what the fifo has; whether there was any."""
        run = self.run
        if run is None or fd not in run.fds:
            return False
        try:
            data = os.read(fd, READ)
        except OSError:  # EAGAIN: nothing there now
            return False
        if data:
            self.send(run.fds[fd], data)
        return bool(data)

    def on_status(self, events: int) -> None:
        try:
            data = os.read(self.bash.stdout.fileno(), READ)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:  # bash exited (`exit` in a run, a `set -e` failure)
            give_up = time.monotonic() + 1.0
            while self.bash_status is None and time.monotonic() < give_up:
                self.reaped(reap())
                time.sleep(0.01)
            code = 255 if self.bash_status is None else self.bash_status
            if self.run is not None and self.run.code is None:
                self.run.code = code
                self.run.done_at = time.monotonic()
            self.respawn(f"the session's shell exited (status {code})")
            self.maybe_done()
            return
        self.statuses += data
        while b"\n" in self.statuses:
            line, _, rest = bytes(self.statuses).partition(b"\n")
            self.statuses[:] = rest
            parts = line.split()
            run = self.run
            if run is not None and len(parts) == 2 and parts[0] == str(run.number).encode():
                run.code = int(parts[1])
                run.done_at = time.monotonic()
        self.maybe_done()

    def maybe_done(self) -> None:
        run = self.run
        if run is None or run.code is None:
            return
        for fd in list(run.fds):  # what it wrote before its status came
            while self.run is run and self.on_output(fd, POLL_IN):
                pass
        if self.run is not run:
            return
        self.send(OUT_EXIT, struct.pack("!i", run.code))
        if self.run is run:
            run.client.sock.setblocking(True)
            run.client.sock.settimeout(5.0)
            with contextlib.suppress(OSError):
                run.client.sock.sendall(run.client.out)
            self.finish(run)
            self.drop(run.client)
            self.next()

    def wait_ms(self) -> int:
        run = self.run
        if run is not None and (run.code is not None or run.stdin_done and run.stdin_fd >= 0):
            return 10
        return 500

    def tick(self) -> None:
        self.on_stdin(0)
        self.maybe_done()
        super().tick()

    def abort(self) -> None:
        """The client went before its run ended: kill what the run started; a shell that
        does not come back is replaced."""
        run = self.run
        if run is None:
            return
        spare = run.before | {self.bash.pid}
        if run.code is None:
            kill_below(spare, limit=1.0)
            if run.stdin_fd >= 0:
                run.stdin.clear()
                run.stdin_done = True
                self.on_stdin(0)
            give_up = time.monotonic() + ABORT_GRACE
            fd = self.bash.stdout.fileno()
            while run.code is None and time.monotonic() < give_up and self.bash_status is None:
                ready = select.select([fd], [], [], 0.05)[0]
                if ready:
                    self.on_status(POLL_IN)
                kill_below(spare, limit=0.2)
            if run.code is None and self.run is run:
                self.respawn("the session's shell did not stop at the last command's timeout")
        self.finish(run)
        self.drop(run.client)
        self.next()

    def finish(self, run: Run) -> None:
        for fd in list(run.fds):
            self.unwatch(fd)
            os.close(fd)
        run.fds.clear()
        if run.stdin_fd >= 0:
            self.unwatch(run.stdin_fd)
            os.close(run.stdin_fd)
            run.stdin_fd = -1
        for suffix in (".cmd", ".in", ".out", ".err"):
            with contextlib.suppress(OSError):
                os.unlink(run.prefix + suffix)
        self.run = None

    def stop(self) -> None:
        if self.run is not None:
            self.finish(self.run)
        with contextlib.suppress(OSError):
            os.killpg(self.bash.pid, signal.SIGKILL)
