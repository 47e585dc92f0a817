"""One run in a shell session: the program run_in_shell executes through the agent's `exec`.

`python3 -I -S -c <this> SOCKET`: so the exec path gives a session's run everything a command
has (output kept head and tail, live output, stdin, timeout, cancel, the sweep). Its stdin
starts with the request (4-byte length, JSON {"command", "env"}), then the run's own stdin.
It connects to the session's holder (shellholder.py), sends `R` and the request, then its
stdin as frames `!BI` D (data) and E (the end); the holder answers frames 1 (stdout), 2
(stderr), 3 (the status, `!i`), written here to this program's own stdout and stderr, and
this program exits with that status. No holder listening: exit MISSING (the platform opens
the session and tries again). The holder gone mid-run: exit 255, saying so on stderr.
Standard library only, Python 3.8 and later.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import struct
import sys

MISSING = 75
MISSING_TEXT = b"sandhub: no shell session holder listens\n"
FRAME = struct.Struct("!BI")
WAIT_OUT = 256 * 1024


def read_exact(count: int) -> bytes:
    data = b""
    while len(data) < count:
        chunk = os.read(0, count - len(data))
        if not chunk:
            raise SystemExit(2)
        data += chunk
    return data


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except BrokenPipeError:
            return


def main() -> None:
    request = read_exact(struct.unpack("!I", read_exact(4))[0])
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(sys.argv[1])
    except (FileNotFoundError, ConnectionRefusedError):
        os.write(2, MISSING_TEXT)
        raise SystemExit(MISSING) from None
    out = bytearray(b"R" + struct.pack("!I", len(request)) + request)
    sock.setblocking(False)
    inbox = bytearray()
    reading_stdin = True
    poller = select.poll()
    while True:
        stdin_mask = select.POLLIN if reading_stdin and len(out) < WAIT_OUT else 0
        if reading_stdin:
            poller.register(0, stdin_mask)
        poller.register(sock, select.POLLIN | (select.POLLOUT if out else 0))
        for fd, events in poller.poll():
            if fd == 0 and events:
                chunk = os.read(0, 65536)
                out += FRAME.pack(ord("D" if chunk else "E"), len(chunk)) + chunk
                if not chunk:
                    reading_stdin = False
                    poller.unregister(0)
            elif fd == sock.fileno():
                if events & select.POLLOUT and out:
                    with contextlib.suppress(BlockingIOError):
                        del out[: sock.send(out)]
                if events & (select.POLLIN | select.POLLHUP | select.POLLERR):
                    try:
                        data = sock.recv(65536)
                    except BlockingIOError:
                        continue
                    except OSError:
                        data = b""
                    if not data:
                        os.write(2, b"sandhub: the shell session ended during the command\n")
                        raise SystemExit(255)
                    inbox += data
                    while len(inbox) >= FRAME.size:
                        kind, length = FRAME.unpack_from(inbox)
                        if len(inbox) < FRAME.size + length:
                            break
                        payload = bytes(inbox[FRAME.size : FRAME.size + length])
                        del inbox[: FRAME.size + length]
                        if kind == 3:
                            raise SystemExit(struct.unpack("!i", payload)[0] & 0xFF)
                        write_all(kind, payload)


if __name__ == "__main__":
    main()
