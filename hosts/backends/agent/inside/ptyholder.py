"""A terminal's holder: a PTY running the sandbox user's login shell (after holder.py, in the
holder's program).

The shell gets a session of its own with the PTY as its controlling terminal, in the
terminal's cwd, TERM=xterm-256color. Its output goes to every attacher (first the scrollback:
the last SCROLLBACK bytes), raw; reading the PTY pauses while an attacher has HIGH_WATER bytes
waiting (the shell's programs then wait, as on a slow terminal), and an attacher stuck so for
STUCK_SECONDS is dropped (it may attach again). A resize sets the PTY's window size: the kernel
sends SIGWINCH to the foreground process group.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import struct
import termios
import time

from .holder import (
    FRAME,
    HIGH_WATER,
    IN_DATA,
    IN_RESIZE,
    MAX_INPUT,
    POLL_GONE,
    POLL_IN,
    POLL_OUT,
    READ,
    SCROLLBACK,
    STUCK_SECONDS,
    Client,
    Holder,
)


class Terminal(Holder):
    kind = "terminal"

    def start(self) -> None:
        master, slave = os.openpty()
        self.resize(slave, int(self.config.get("cols") or 80), int(self.config.get("rows") or 24))
        env = dict(self.env, TERM="xterm-256color")
        bash = next((p for p in ("/bin/bash", "/usr/bin/bash") if os.access(p, os.X_OK)), None)
        argv = [bash, "-l"] if bash else ["/bin/sh"]
        pid = os.fork()
        if pid == 0:  # the shell: a session of its own, the PTY its controlling terminal
            try:
                os.setsid()
                fcntl.ioctl(slave, termios.TIOCSCTTY, 0)
                for fd in (0, 1, 2):
                    os.dup2(slave, fd)
                os.closerange(3, 65536)
                with contextlib.suppress(OSError):
                    os.chdir(self.cwd)
                os.execve(argv[0], argv, env)
            finally:
                os._exit(127)
        os.close(slave)
        os.set_blocking(master, False)
        self.master, self.shell = master, pid
        self.scrollback = bytearray()
        self.typed = bytearray()  # input the shell has not taken yet
        self.attachers: dict = {}
        self.shell_ended = False  # its output is read until the PTY has none left
        self.watch(master, POLL_IN, self.on_master)

    @staticmethod
    def resize(fd: int, cols: int, rows: int) -> None:
        cols, rows = max(1, min(cols, 1000)), max(1, min(rows, 1000))
        with contextlib.suppress(OSError):  # the kernel signals the foreground group
            fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    def attached(self) -> int:
        return len(self.attachers)

    def busy(self) -> bool:
        return bool(self.attachers)

    def accepts(self, first: bytes) -> bool:
        return first == b"A"

    def take(self, client: Client, first: bytes) -> None:
        self.attachers[client.fd] = client
        self.touched = time.monotonic()
        client.out += self.scrollback
        self.watch(client.fd, POLL_IN, lambda ev: self.on_attacher(client, ev))
        self.flush(client)

    def dropped(self, client: Client) -> None:
        if self.attachers.pop(client.fd, None) is not None:  # (not a look at its info)
            self.touched = time.monotonic()
            self.arm_master()

    def flush(self, client: Client) -> None:
        if not client.flush():
            self.drop(client)
            return
        if client.fd in self.handlers:
            self.poller.modify(client.fd, POLL_IN | (POLL_OUT if client.out else 0))
        self.arm_master()

    def arm_master(self) -> None:
        if self.master < 0:
            return
        full = any(len(c.out) > HIGH_WATER for c in self.attachers.values())
        mask = (0 if full else POLL_IN) | (POLL_OUT if self.typed else 0)
        self.poller.modify(self.master, mask)

    def on_master(self, events: int) -> None:
        if events & POLL_OUT and self.typed:
            try:
                del self.typed[: os.write(self.master, self.typed)]
            except (BlockingIOError, InterruptedError):
                pass
            except OSError:
                self.typed.clear()
        if events & (POLL_IN | POLL_GONE):
            try:
                data = os.read(self.master, READ)
            except (BlockingIOError, InterruptedError):
                data = None
            except OSError:  # EIO: the shell and everything on the PTY are gone
                data = b""
            if data == b"":
                self.running = False
                return
            if data:
                self.output(data)
        self.arm_master()

    def output(self, data: bytes) -> None:
        self.last_activity = time.time()
        self.scrollback += data
        if len(self.scrollback) > SCROLLBACK:
            del self.scrollback[: len(self.scrollback) - SCROLLBACK]
        for client in list(self.attachers.values()):
            client.out += data
            self.flush(client)

    def on_attacher(self, client: Client, events: int) -> None:
        if events & POLL_OUT:
            self.flush(client)
        if not events & (POLL_IN | POLL_GONE):
            return
        data = client.receive()
        if data is None:
            return
        if not data:
            self.drop(client)
            return
        while len(client.inbox) >= FRAME.size:
            kind, length = FRAME.unpack_from(client.inbox)
            if len(client.inbox) < FRAME.size + length:
                break
            payload = bytes(client.inbox[FRAME.size : FRAME.size + length])
            del client.inbox[: FRAME.size + length]
            self.frame(kind, payload)

    def frame(self, kind: int, payload: bytes) -> None:
        self.touched = time.monotonic()
        self.last_activity = time.time()
        if kind == IN_DATA and len(self.typed) + len(payload) <= MAX_INPUT:
            self.typed += payload
            self.on_master(POLL_OUT)
        elif kind == IN_RESIZE and len(payload) == 4:
            self.resize(self.master, *struct.unpack("!HH", payload))

    def tick(self) -> None:
        now = time.monotonic()
        for client in list(self.attachers.values()):
            if client.full_since and now - client.full_since > STUCK_SECONDS:
                self.drop(client)
        super().tick()
        if self.shell_ended and self.running:
            # The shell is gone, though something it left holds the PTY open: what is
            # there is read, then the terminal ends (and that is killed with it).
            try:
                data = os.read(self.master, READ)
            except OSError:
                data = b""
            if data:
                self.output(data)
            else:
                self.running = False

    def reaped(self, done: list) -> None:
        if any(pid == self.shell for pid, _ in done):
            self.shell_ended = True

    def wait_ms(self) -> int:
        return 50 if self.shell_ended else 500

    def stop(self) -> None:
        # What the shell printed last reaches who is attached, as far as it goes at once.
        for client in list(self.attachers.values()):
            with contextlib.suppress(OSError):
                client.sock.setblocking(True)
                client.sock.settimeout(1.0)
                client.sock.sendall(client.out)
            client.sock.close()
        with contextlib.suppress(OSError):
            os.killpg(self.shell, signal.SIGKILL)
        os.close(self.master)
        self.master = -1
