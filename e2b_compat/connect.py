"""The Connect protocol (connectrpc.com/docs/protocol), server side, as E2B's SDKs speak it to
envd: what it takes to decode a request and to answer one, without a framework.

- Unary: POST /<package>.<Service>/<Method>, the message as the body (`application/proto`, or
  `application/json` in protobuf's JSON mapping); the answer is 200 with the message, or an
  error status with `{"code": ..., "message": ...}` as JSON.
- Server streaming: the body is one enveloped message (`application/connect+proto`); the
  answer is 200 and a series of envelopes, the last one flagged end-of-stream and holding
  `{"error": {...}}` or `{}` as JSON. An envelope is 1 byte of flags (0x01 compressed, 0x02
  end of stream), the length as 4 bytes big-endian, then the bytes.
- gzip, if the request says so (Content-Encoding for unary, Connect-Content-Encoding and the
  envelope's flag for streams); answers are never compressed.
"""

from __future__ import annotations

import gzip
import io
import json
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TypeVar

from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message

__all__ = ["CODE_STATUS", "ConnectError", "Envelope", "decode_unary", "envelope", "end_of_stream"]

M = TypeVar("M", bound=Message)

FLAG_COMPRESSED = 0x01
FLAG_END_STREAM = 0x02
MAX_MESSAGE_BYTES = 64 * 1024 * 1024  # a file's bytes are sent over /files, not as messages

# Each Connect error code and the HTTP status a unary answer with it has.
CODE_STATUS = {
    "canceled": 499,
    "unknown": 500,
    "invalid_argument": 400,
    "deadline_exceeded": 504,
    "not_found": 404,
    "already_exists": 409,
    "permission_denied": 403,
    "resource_exhausted": 429,
    "failed_precondition": 400,
    "aborted": 409,
    "out_of_range": 400,
    "unimplemented": 501,
    "internal": 500,
    "unavailable": 503,
    "data_loss": 500,
    "unauthenticated": 401,
}


class ConnectError(Exception):
    """An error as the client sees it: a Connect code and a message for a person."""

    def __init__(self, code: str, message: str) -> None:
        if code not in CODE_STATUS:
            raise ValueError(f"not a Connect error code: {code}")
        super().__init__(message)
        self.code, self.message = code, message

    @property
    def status(self) -> int:
        return CODE_STATUS[self.code]

    def body(self) -> bytes:
        return json.dumps({"code": self.code, "message": self.message}).encode()


@dataclass(frozen=True)
class Codec:
    """How messages of one request are written: proto or JSON."""

    json: bool
    streaming: bool

    @property
    def content_type(self) -> str:
        kind = "json" if self.json else "proto"
        return f"application/connect+{kind}" if self.streaming else f"application/{kind}"

    def parse(self, data: bytes, message: M) -> M:
        try:
            if self.json:
                json_format.Parse(data or b"{}", message, ignore_unknown_fields=True)
            else:
                message.ParseFromString(data)
        except (DecodeError, json_format.ParseError, UnicodeDecodeError) as exc:
            raise ConnectError(
                "invalid_argument", f"the request's message is malformed: {exc}"
            ) from exc
        return message

    def serialize(self, message: Message) -> bytes:
        if self.json:
            return json_format.MessageToJson(message, indent=None).encode()
        return message.SerializeToString()


def codec_for(content_type: str) -> Codec:
    """The codec of a request's Content-Type; ConnectError for one that is not Connect's."""
    kind = content_type.split(";", 1)[0].strip().lower()
    known = {
        "application/proto": Codec(json=False, streaming=False),
        "application/json": Codec(json=True, streaming=False),
        "application/connect+proto": Codec(json=False, streaming=True),
        "application/connect+json": Codec(json=True, streaming=True),
    }
    if kind not in known:
        raise ConnectError("invalid_argument", f"unsupported content type {kind or '(none)'}")
    return known[kind]


def decode_unary(body: bytes, codec: Codec, message: M, content_encoding: str = "") -> M:
    """The request message of a unary call."""
    return codec.parse(_decompressed(body, content_encoding), message)


@dataclass(frozen=True)
class Envelope:
    flags: int
    data: bytes


def envelopes(body: bytes) -> Iterator[Envelope]:
    """The envelopes of a streaming request's body; ConnectError if it is cut short."""
    at = 0
    while at < len(body):
        if len(body) - at < 5:
            raise ConnectError("invalid_argument", "an envelope's header is cut short")
        flags, size = struct.unpack_from(">BI", body, at)
        if size > MAX_MESSAGE_BYTES:
            raise ConnectError("resource_exhausted", f"a message of {size} bytes is too large")
        data = body[at + 5 : at + 5 + size]
        if len(data) < size:
            raise ConnectError("invalid_argument", "an envelope's message is cut short")
        yield Envelope(flags, data)
        at += 5 + size


def decode_stream_request(body: bytes, codec: Codec, message: M, content_encoding: str = "") -> M:
    """The one request message of a server-streaming call."""
    found = [e for e in envelopes(body) if not e.flags & FLAG_END_STREAM]
    if len(found) != 1:
        raise ConnectError("invalid_argument", f"expected one request message, got {len(found)}")
    data = found[0].data
    if found[0].flags & FLAG_COMPRESSED:
        data = _decompressed(data, content_encoding or "gzip")
    return codec.parse(data, message)


def envelope(codec: Codec, message: Message) -> bytes:
    data = codec.serialize(message)
    return struct.pack(">BI", 0, len(data)) + data


def end_of_stream(error: ConnectError | None = None) -> bytes:
    """The stream's last envelope: its error, if it ended with one."""
    body: dict[str, object] = {}
    if error is not None:
        body["error"] = {"code": error.code, "message": error.message}
    data = json.dumps(body).encode()
    return struct.pack(">BI", FLAG_END_STREAM, len(data)) + data


def _decompressed(data: bytes, encoding: str) -> bytes:
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return data
    if encoding != "gzip":
        raise ConnectError("unimplemented", f"unsupported compression {encoding}")
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as unzipped:
            out = unzipped.read(MAX_MESSAGE_BYTES + 1)
    except (OSError, EOFError) as exc:
        raise ConnectError("invalid_argument", f"the request's gzip is malformed: {exc}") from exc
    if len(out) > MAX_MESSAGE_BYTES:
        raise ConnectError("resource_exhausted", "the request's message is too large")
    return out
