"""The server name of a TLS ClientHello, read from the bytes a client sent first (the proxy
decides where a transparent connection goes, and checks a CONNECT tunnel, by it)."""

from __future__ import annotations

from dataclasses import dataclass

HANDSHAKE = 0x16
CLIENT_HELLO = 0x01
SERVER_NAME = 0x0000
MAX_HELLO = 64 * 1024  # a ClientHello larger than this is refused


class NotClientHello(ValueError):
    """The bytes are not (or not only) a well-formed TLS ClientHello."""


@dataclass(frozen=True)
class Hello:
    sni: str | None  # the host_name of the server_name extension (lower case), None if absent
    size: int  # bytes of records the ClientHello took


def parse_client_hello(data: bytes) -> Hello | None:
    """The ClientHello at the start of `data`; None while more bytes are needed.
    NotClientHello when the bytes cannot be one."""
    message = bytearray()
    offset = 0
    while True:
        if len(data) < offset + 5:
            return None
        if data[offset] != HANDSHAKE:
            raise NotClientHello("not a TLS handshake record")
        length = int.from_bytes(data[offset + 3 : offset + 5], "big")
        if len(data) < offset + 5 + length:
            return None
        message += data[offset + 5 : offset + 5 + length]
        offset += 5 + length
        if len(message) >= 4:
            if message[0] != CLIENT_HELLO:
                raise NotClientHello("the first handshake message is not a ClientHello")
            total = 4 + int.from_bytes(message[1:4], "big")
            if total > MAX_HELLO:
                raise NotClientHello("ClientHello too large")
            if len(message) >= total:
                return Hello(sni=_server_name(bytes(message[4:total])), size=offset)
        if offset > MAX_HELLO + 5 * 16:
            raise NotClientHello("ClientHello too large")


def _server_name(body: bytes) -> str | None:
    reader = _Reader(body)
    reader.take(2 + 32)  # legacy_version, random
    reader.take(reader.number(1))  # session id
    reader.take(reader.number(2))  # cipher suites
    reader.take(reader.number(1))  # compression methods
    if reader.done():
        return None  # no extensions at all
    extensions = _Reader(reader.take(reader.number(2)))
    while not extensions.done():
        kind = extensions.number(2)
        content = extensions.take(extensions.number(2))
        if kind == SERVER_NAME:
            return _host_name(_Reader(content))
    return None


def _host_name(reader: _Reader) -> str | None:
    names = _Reader(reader.take(reader.number(2)))
    while not names.done():
        kind = names.number(1)
        name = names.take(names.number(2))
        if kind == 0:
            try:
                return name.decode("ascii").lower().rstrip(".")
            except UnicodeDecodeError as error:
                raise NotClientHello("server name is not ASCII") from error
    return None


class _Reader:
    def __init__(self, data: bytes) -> None:
        self._data = data
        self._offset = 0

    def take(self, count: int) -> bytes:
        if self._offset + count > len(self._data):
            raise NotClientHello("truncated ClientHello")
        chunk = self._data[self._offset : self._offset + count]
        self._offset += count
        return chunk

    def number(self, size: int) -> int:
        return int.from_bytes(self.take(size), "big")

    def done(self) -> bool:
        return self._offset >= len(self._data)
