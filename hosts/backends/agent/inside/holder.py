"""The holder of one terminal or shell session: a small detached process in the sandbox.

Not a part of the agent's bundle: the agent carries this file's text (source.py) and starts it
as a program of its own (terminals.py, op terminal_open), in a session of its own, so it
outlives the agent's stream, the platform process and the browser tab. Standard library only,
Python 3.8 and later, one thread, one poll loop; it never blocks on any client.

It listens on DIR/ID.sock (DIR is 0700, the sandbox user's). A client's first byte says what it
wants: I (info: one JSON line), C (close: everything of it is killed, then the connection
ends), A (attach to a terminal), R (run a command in a shell session). It is a child subreaper,
so whatever its shell starts stays below it, however it detaches, and is killed with it.

Terminal (mode "terminal"): a PTY running the user's login shell. An attacher first gets the
scrollback (the last SCROLLBACK bytes of output), then the output as it comes, raw; it sends
frames `!BI` (kind, length) + payload: IN_DATA keystrokes, IN_RESIZE `!HH` cols, rows.

Shell session (mode "shell"): bash on pipes, reading from the holder what to run. Runs come one
at a time (a second client waits its turn). shellclient.py documents the run's framing.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import struct
import time

SCROLLBACK = 256 * 1024
HIGH_WATER = 256 * 1024  # bytes waiting for one client before the source stops being read
STUCK_SECONDS = 10.0  # an attacher that took nothing for this long, over HIGH_WATER: dropped
MAX_INPUT = 1024 * 1024  # keystrokes waiting for the shell; more is dropped
MAX_CLIENTS = 64
READ = 64 * 1024
FRAME = struct.Struct("!BI")
IN_DATA, IN_RESIZE = 0, 1
OUT_STDOUT, OUT_STDERR, OUT_EXIT = 1, 2, 3
ABORT_GRACE = 1.5  # after a dropped run's processes are killed, how long bash has to answer
POLL_IN, POLL_OUT = select.POLLIN, select.POLLOUT
POLL_GONE = select.POLLHUP | select.POLLERR | select.POLLNVAL


def _libc():
    try:
        import ctypes

        return ctypes.CDLL(None)
    except Exception:
        return None


def children_of(root: int) -> list[int]:
    """Every live (not zombie) descendant of `root`, from /proc."""
    below: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                fields = handle.read().rpartition(b")")[2].split()
        except OSError:
            continue
        if fields and fields[0] not in (b"Z", b"X"):
            below.setdefault(int(fields[1]), []).append(int(name))
    found, todo = [], [root]
    while todo:
        for pid in below.get(todo.pop(), []):
            found.append(pid)
            todo.append(pid)
    return found


def reap() -> list[tuple[int, int]]:
    done: list[tuple[int, int]] = []
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return done
        if pid == 0:
            return done
        done.append((pid, status))


def kill_below(spare: set[int], limit: float = 3.0) -> None:
    """SIGKILL every descendant of this process not in `spare`, until none is left."""
    give_up = time.monotonic() + limit
    while time.monotonic() < give_up:
        victims = [pid for pid in children_of(os.getpid()) if pid not in spare]
        if not victims:
            return
        for pid in victims:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        reap()
        time.sleep(0.01)


def opened_by(pid: int, path: str) -> bool:
    """Whether the process has the file open (the holder's own read-write end of a fifo
    makes the kernel's test, an O_NONBLOCK open for writing, always succeed)."""
    base = f"/proc/{pid}/fd"
    with contextlib.suppress(OSError):
        for name in os.listdir(base):
            with contextlib.suppress(OSError):
                if os.readlink(f"{base}/{name}") == path:
                    return True
    return False


def status_code(status: int) -> int:
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status) if os.WIFEXITED(status) else 255


class Client:
    """A connection: bytes in, bytes waiting to go out."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.fd = sock, sock.fileno()
        self.inbox = bytearray()
        self.out = bytearray()
        self.full_since = 0.0

    def receive(self) -> bytes | None:
        """What came, added to the inbox too: None if nothing is there yet, b"" if the
        client is gone."""
        try:
            data = self.sock.recv(READ)
        except (BlockingIOError, InterruptedError):
            return None
        except OSError:
            data = b""
        self.inbox += data
        return data

    def flush(self) -> bool:
        """Send what it can; False if the client is gone."""
        while self.out:
            try:
                sent = self.sock.send(self.out)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                return False
            del self.out[:sent]
        if len(self.out) <= HIGH_WATER:
            self.full_since = 0.0
        elif not self.full_since:
            self.full_since = time.monotonic()
        return True


class Holder:
    kind = ""

    def __init__(self, config: dict, listener: socket.socket) -> None:
        self.config, self.listener = config, listener
        self.path = config["path"]
        self.cwd = config.get("cwd") or "/"
        self.env = {str(k): str(v) for k, v in (config.get("env") or {}).items()}
        self.idle = float(config.get("idle") or 0)
        self.started_at = self.last_activity = time.time()
        self.touched = time.monotonic()  # last input or attach: what the idle timeout counts
        self.poller = select.poll()
        self.handlers: dict = {}
        self.clients: dict = {}  # fd -> Client
        self.closers: list = []
        self.running = True

    # --- the loop --------------------------------------------------------------------------
    def watch(self, fd: int, mask: int, handler) -> None:
        self.poller.register(fd, mask)
        self.handlers[fd] = handler

    def unwatch(self, fd: int) -> None:
        if self.handlers.pop(fd, None) is not None:
            self.poller.unregister(fd)

    def serve(self) -> None:
        self.listener.setblocking(False)
        self.watch(self.listener.fileno(), POLL_IN, self.on_accept)
        self.start()
        while self.running:
            for fd, events in self.poller.poll(self.wait_ms()):
                handler = self.handlers.get(fd)
                if handler is not None:
                    handler(events)
            self.tick()
        self.end()

    def wait_ms(self) -> int:
        return 500

    def tick(self) -> None:
        self.reaped(reap())
        busy = self.busy()
        if busy:
            self.touched = time.monotonic()
        elif self.idle > 0 and time.monotonic() - self.touched > self.idle:
            self.running = False

    def reaped(self, done: list) -> None:
        pass

    def busy(self) -> bool:
        return False

    def end(self) -> None:
        for path in (self.path, self.path[: -len(".sock")] + ".log"):
            with contextlib.suppress(OSError):
                os.unlink(path)
        self.listener.close()
        self.stop()
        kill_below(set())
        for sock in self.closers:
            sock.close()
        os._exit(0)

    # --- clients ---------------------------------------------------------------------------
    def on_accept(self, events: int) -> None:
        try:
            sock, _ = self.listener.accept()
        except OSError:
            return
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        uid = struct.unpack("3i", creds)[1]
        if uid not in (os.getuid(), 0) or len(self.clients) >= MAX_CLIENTS:
            sock.close()
            return
        sock.setblocking(False)
        client = Client(sock)
        self.clients[client.fd] = client
        self.watch(client.fd, POLL_IN, lambda ev: self.on_greeting(client, ev))

    def drop(self, client: Client) -> None:
        self.unwatch(client.fd)
        self.clients.pop(client.fd, None)
        client.sock.close()
        self.dropped(client)

    def dropped(self, client: Client) -> None:
        pass

    def on_greeting(self, client: Client, events: int) -> None:
        try:
            first = client.sock.recv(1)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            first = b""
        if first == b"I":
            info = {"id": self.config["id"], "kind": self.kind, "pid": os.getpid()}
            info.update(started_at=self.started_at, last_activity=self.last_activity)
            info["attached"] = self.attached()
            client.sock.setblocking(True)
            with contextlib.suppress(OSError):
                client.sock.sendall(json.dumps(info).encode() + b"\n")
            self.drop(client)
        elif first == b"C":
            self.unwatch(client.fd)
            self.clients.pop(client.fd, None)
            self.closers.append(client.sock)
            self.running = False
        elif first and self.accepts(first):
            self.unwatch(client.fd)
            self.take(client, first)
        else:
            self.drop(client)

    def attached(self) -> int:
        return 0

    def accepts(self, first: bytes) -> bool:
        return False

    # --- the kind's own ----------------------------------------------------------------------
    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        pass

    def take(self, client: Client, first: bytes) -> None:
        raise NotImplementedError
