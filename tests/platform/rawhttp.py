"""HTTP/1.1 over a plain socket, for the request-head limit's tests (test_httpserver.py,
test_request_head_limit.py): heads of an exact size, pipelined requests in one write, and
the raw answer read to the end. Not a test module."""

from __future__ import annotations

import re
import socket
from pathlib import Path

STATUS = re.compile(rb"HTTP/1\.1 (\d{3}) ")
FILLER = b"X-Filler: "


def head(
    target: str = "/",
    size: int | None = None,
    method: str = "GET",
    extra: tuple[bytes, ...] = (),
    close: bool = False,
) -> bytes:
    """A request head; given `size`, one X-Filler header makes it exactly that many bytes."""
    lines = [f"{method} {target} HTTP/1.1".encode(), b"Host: 127.0.0.1", *extra]
    if close:
        lines.append(b"Connection: close")
    made = b"\r\n".join(lines) + b"\r\n\r\n"
    if size is None:
        return made
    filler = size - len(made) - len(FILLER) - 2
    if filler < 0:
        raise ValueError(f"a head of {size} bytes cannot hold {made!r}")
    return made[:-2] + FILLER + b"f" * filler + b"\r\n\r\n"


def chunked(body: bytes, chunk: int) -> bytes:
    pieces = [b"%x\r\n%s\r\n" % (len(part), part) for part in _parts(body, chunk)]
    return b"".join(pieces) + b"0\r\n\r\n"


def _parts(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


def exchange(port: int, data: bytes, timeout: float = 30.0) -> bytes:
    """Send `data` (the whole of it: a refused client still finishes its request, as curl
    does) and read the answer until the server closes the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        received = bytearray()
        while chunk := sock.recv(65536):
            received += chunk
        return bytes(received)


def statuses(answer: bytes) -> list[int]:
    return [int(code) for code in STATUS.findall(answer)]


def answer_head(answer: bytes) -> str:
    return answer.split(b"\r\n\r\n", 1)[0].decode("latin-1").lower()


def rss_kib(pid: int) -> int:
    """The process's resident set (VmRSS), in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for process {pid}")
