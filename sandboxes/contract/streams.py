"""A download's chunks as services return them (open_file_stream)."""

from __future__ import annotations

from collections.abc import Callable, Iterator


class FileStream(Iterator[bytes]):
    """One file's content as chunks (open_file_stream). close() releases what feeds it (the
    backend's stream) at once, whether it was read to the end, in part, or not at all."""

    def __init__(self, chunks: Iterator[bytes], *sources: object) -> None:
        self._chunks = chunks
        self._sources = (chunks, *sources)
        self._closed = False

    def __next__(self) -> bytes:
        if self._closed:
            raise StopIteration
        return next(self._chunks)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        errors: list[BaseException] = []
        for source in self._sources:
            close: Callable[[], object] | None = getattr(source, "close", None)
            if close is not None:
                try:
                    close()
                except Exception as exc:  # close every source; report the first failure
                    errors.append(exc)
        if errors:
            raise errors[0]
