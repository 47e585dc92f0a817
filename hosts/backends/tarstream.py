"""A download's tar stream (any kind on its per-command path): the stdout of `tar -c`
(archives.TAR_CREATE) as chunks, over a source each kind supplies.

The first chunk is read when the stream is made, so FileNotFoundError (missing) and PermissionError
(unreadable) are raised by the caller's call rather than mid-stream; an error tar ended with
(archives.tar_failure) is raised at the stream's end. close() ends the stream, and the tar with
it (its next write fails), at once: a consumer that stops reading holds nothing open.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from hosts.backends import archives
from hosts.backends.base import HeadTailBuffer


class TarSource(Protocol):
    """One running tar of a kind: Docker's engine exec, SSH's channel."""

    def read(self, errors: HeadTailBuffer) -> bytes | None:
        """The next stdout chunk, stderr that comes first into `errors`; None at the end.
        BackendError (or the kind's own) when the transfer stalls or breaks."""

    def finish(self) -> int | None:
        """Close, and the exit code tar ended with (None if none came)."""

    def close(self) -> None:
        """End at once (the consumer stopped reading); called again after finish."""


class TarStream(Iterator[bytes]):
    """The stdout of a `tar -c` as chunks, the first read here; close() ends it (and the
    tar) at once."""

    def __init__(self, source: TarSource, path: str) -> None:
        self._source, self._path = source, path
        self._errors = HeadTailBuffer(4096)
        self._done = False
        self._first: bytes | None = None
        self._first = self._read()

    def __next__(self) -> bytes:
        chunk, self._first = self._first, None
        if chunk is None and not self._done:
            chunk = self._read()
        if chunk is None:
            raise StopIteration
        return chunk

    def _read(self) -> bytes | None:
        """The next stdout chunk; at the end, None (or the error tar ended with)."""
        try:
            chunk = self._source.read(self._errors)
            code = self._source.finish() if chunk is None else None
        except BaseException:
            self.close()
            raise
        if chunk is not None:
            return chunk
        self.close()
        message = self._errors.getvalue().decode("utf-8", "replace").strip()
        if (failure := archives.tar_failure(self._path, code, message)) is not None:
            raise failure
        return None

    def close(self) -> None:
        self._done = True
        self._first = None
        self._source.close()
