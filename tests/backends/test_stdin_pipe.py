"""StdinPipe: what one thread writes another reads in order, a bounded amount at a time,
until close(); writes after close are refused."""

from __future__ import annotations

import threading
import time

import pytest

from hosts.backends.stdin import StdinClosed, StdinPipe


def test_reads_what_is_written_in_order_then_eof() -> None:
    pipe = StdinPipe()
    pipe.write(b"abc")
    pipe.write(b"defgh")
    assert pipe.read(2) == b"ab" and pipe.read(-1) == b"c" and pipe.read(100) == b"defgh"
    pipe.close()
    assert pipe.read(10) == b""
    with pytest.raises(StdinClosed):
        pipe.write(b"late")


def test_a_reader_waits_for_input_and_a_writer_for_room() -> None:
    pipe = StdinPipe(max_buffered=4)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.extend(pipe.chunks()))
    reader.start()
    time.sleep(0.05)
    assert got == []  # nothing written yet: it waits
    for piece in (b"12", b"34", b"56", b"78"):
        pipe.write(piece, timeout=5)  # at most 4 bytes queued: writers wait for the reader
    pipe.close()
    reader.join(5)
    assert b"".join(got) == b"12345678"


def test_a_writer_gives_up_when_nothing_reads() -> None:
    pipe = StdinPipe(max_buffered=2)
    pipe.write(b"12")
    with pytest.raises(TimeoutError):
        pipe.write(b"3", timeout=0.1)
