"""Calls in flight on an AgentClient: what each collects, how it waits, and the errors.

The reader thread feeds a call (on_data, on_credit, finish, fail); the caller's thread waits
on it. Memory is bounded per call: kept output at most its cap, a read at most its length.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Protocol

from hosts.backends.agent import protocol
from hosts.backends.base import (
    BackendError,
    ExecResult,
    FileEntry,
    HeadTailBuffer,
    OutputCallback,
    PortClosed,
    TerminalGone,
)

# After a cancel (the caller's deadline passed), how long the agent has to answer before it
# is taken for stuck: it kills with SIGTERM, then SIGKILL after kill_after, and sweeps.
CANCEL_GRACE = 8.0


class AgentClient(Protocol):
    """What a call needs of its client (client.AgentClient)."""

    def cancel(self, rid: int) -> None: ...

    def abandon(self, reason: str) -> None: ...


class AgentBroken(BackendError):
    """The agent's stream broke (the agent died, the sandbox went away, the link failed)."""


class AgentUnreached(AgentBroken):
    """The agent's stream was broken before the request left this process (the agent already
    dead, or its first byte refused): the agent never saw it, so it may be tried again on a
    new agent, whatever it asks."""


class NothingSent(OSError):
    """A transport's sendall failed before any byte of the data went out."""


class AgentStartFailed(AgentBroken):
    """The agent did not come up; `said` is its stderr, `early` the first bytes it wrote."""

    def __init__(self, message: str, *, said: str = "", early: bytes = b"") -> None:
        super().__init__(message)
        self.said, self.early = said, early


class AgentRefused(BackendError):
    """The agent refused a request (`kind` is one of protocol.ERR_*)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class NotAFile(OSError):
    """The path is not a regular file (a directory, a device, a fifo)."""


_OS_ERRORS: dict[str, type[OSError]] = {
    protocol.ERR_NOT_FOUND: FileNotFoundError,
    protocol.ERR_PERMISSION: PermissionError,
    protocol.ERR_NOT_A_DIRECTORY: NotADirectoryError,
    protocol.ERR_EXISTS: FileExistsError,
    protocol.ERR_NOT_A_FILE: NotAFile,
}


def refusal(body: dict[str, Any]) -> Exception:
    kind, message = str(body.get("kind")), str(body.get("message"))
    if kind in _OS_ERRORS:
        return _OS_ERRORS[kind](message)
    if kind == protocol.ERR_PORT_CLOSED:
        return PortClosed(message)
    if kind == protocol.ERR_TERMINAL_GONE:
        return TerminalGone(message)
    return AgentRefused(kind, message)


def file_entry(row: list[Any]) -> FileEntry:
    name, path, kind, size, mtime, mode = row
    return FileEntry(
        name=_text(name),
        path=_text(path),
        kind=str(kind),
        size=int(size),
        mtime=float(mtime),
        mode=str(mode),
    )


def _text(name: str) -> str:
    # Bytes that are not UTF-8 come as surrogate escapes; show them as the per-command
    # path's listing does (\xNN).
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


class Call:
    """One request: its answer (body) or error, and its inbound window (CREDIT)."""

    def __init__(self, client: AgentClient, rid: int) -> None:
        self.client, self.rid = client, rid
        self.done = threading.Event()
        self.wakeup = threading.Event()  # set on anything the waiting thread must look at
        self.body: dict[str, Any] = {}
        self.error: BaseException | None = None
        self._cond = threading.Condition()
        self._window = protocol.WINDOW

    def on_data(self, channel: int, chunk: bytes) -> None:
        """Data of a channel this call does not take: dropped."""

    def on_credit(self, count: int) -> None:
        with self._cond:
            self._window += count
            self._cond.notify_all()

    def finish(self, body: dict[str, Any]) -> None:
        self.body = body
        self._end()

    def fail(self, error: BaseException) -> None:
        self.error = error
        self._end()

    def _end(self) -> None:
        self.done.set()
        self.wakeup.set()
        with self._cond:
            self._cond.notify_all()

    def reserve(self, size: int, deadline: float) -> bool:
        """Wait until `size` more bytes may be sent; False if the call ended (or the deadline
        passed) first, when the rest of the input is not sent at all."""
        with self._cond:
            while self._window < size and not self.done.is_set():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(min(remaining, 1.0))
            if self.done.is_set():
                return False
            self._window -= size
            return True

    def wait_body(self, deadline: float) -> dict[str, Any]:
        """The answer; BackendError if none came by the deadline (the call is cancelled, and
        an agent that does not answer the cancel either is dropped)."""
        if not self.done.wait(max(0.0, deadline - time.monotonic())):
            self.client.cancel(self.rid)
            if not self.done.wait(CANCEL_GRACE):
                self.client.abandon("a call got no answer, not even to its cancel")
            raise BackendError("the sandbox agent did not answer in time")
        if self.error is not None:
            raise self.error
        return self.body


class Collect(Call):
    """A call whose answer comes as data on one channel: bytes (up to `limit`) or parts."""

    def __init__(self, client: AgentClient, rid: int, channel: int, limit: int = -1) -> None:
        super().__init__(client, rid)
        self.channel, self.limit = channel, limit
        self.buffer = bytearray()
        self.parts: list[bytes] = []

    def on_data(self, channel: int, chunk: bytes) -> None:
        if channel != self.channel:
            return
        if self.limit < 0:
            self.parts.append(chunk)
        else:
            self.buffer += chunk[: max(0, self.limit - len(self.buffer))]


_HEADS = {protocol.CH_STDOUT_HEAD, protocol.CH_STDERR_HEAD}
_KEPT = (protocol.CH_STDOUT_HEAD, protocol.CH_STDOUT_TAIL)
_KEPT_ERR = (protocol.CH_STDERR_HEAD, protocol.CH_STDERR_TAIL)
_NAMES = {protocol.CH_STDOUT: "stdout", protocol.CH_STDERR: "stderr"}


class ExecCall(Call):
    """A command in flight: wait() for its ExecResult, cancel() to stop it."""

    def __init__(
        self,
        client: AgentClient,
        rid: int,
        cap: int,
        on_output: OutputCallback | None,
        marker: str,
        deadline: float,
    ) -> None:
        super().__init__(client, rid)
        self.cap, self.on_output, self.marker, self.deadline = cap, on_output, marker, deadline
        self.kept = {channel: bytearray() for channel in (*_KEPT, *_KEPT_ERR)}
        self.callback_error: BaseException | None = None
        self.cancel_sent = False
        self.cut = False  # the caller's own deadline ended it

    def on_data(self, channel: int, chunk: bytes) -> None:
        if channel in _NAMES:
            if self.on_output is not None and self.callback_error is None:
                try:
                    self.on_output(_NAMES[channel], chunk)
                except BaseException as exc:  # the waiting thread cancels, then raises it
                    self.callback_error = exc
                    self.wakeup.set()
        elif channel in self.kept:
            buffer = self.kept[channel]
            limit = self.cap - self.cap // 2 if channel in _HEADS else self.cap // 2
            buffer += chunk[: max(0, limit - len(buffer))]

    def cancel(self) -> None:
        """Stop the command (SIGTERM to its process group, SIGKILL after kill_after, then
        the sweep); wait() then returns its result."""
        if not self.done.is_set() and not self.cancel_sent:
            self.cancel_sent = True
            self.client.cancel(self.rid)

    @property
    def cancelled(self) -> bool:
        return bool(self.body.get("cancelled"))

    def wait(self) -> ExecResult:
        started = time.monotonic()
        try:
            while not self.done.is_set():
                remaining = self.deadline - time.monotonic()
                if remaining <= 0:
                    break
                self.wakeup.wait(remaining)
                self.wakeup.clear()
                if self.callback_error is not None:
                    self.cancel()
            if not self.done.is_set():
                self.cut = True
                self.cancel()
                if not self.done.wait(CANCEL_GRACE):
                    self.client.abandon(
                        "a command passed its deadline and its cancel got no answer"
                    )
                    return self._empty(time.monotonic() - started)
        except BaseException:
            self.cancel()  # an interrupted caller must not leave the command running
            raise
        if self.callback_error is not None:
            raise self.callback_error
        if self.error is not None:
            if self.cut and isinstance(self.error, AgentBroken):
                return self._empty(time.monotonic() - started)
            raise self.error
        return self._result()

    def _result(self) -> ExecResult:
        body = self.body
        if not body.get("swept", True):
            raise BackendError(
                f"the command ended (status {body.get('exit_code')}), but processes it left "
                "behind could not be stopped"
            )
        out = self._kept(_KEPT, int(body["stdout_bytes"]))
        err = self._kept(_KEPT_ERR, int(body["stderr_bytes"]))
        return ExecResult(
            # Cut by the caller's own deadline: no exit code, as the per-command path says it.
            exit_code=None if self.cut else body.get("exit_code"),
            stdout=out.getvalue(),
            stderr=err.getvalue(),
            stdout_bytes=out.total,
            stderr_bytes=err.total,
            stdout_truncated=out.truncated,
            stderr_truncated=err.truncated,
            timed_out=bool(body.get("timed_out")) or self.cut,
            duration_seconds=float(body.get("duration") or 0.0),
        )

    def _kept(self, channels: tuple[int, int], total: int) -> HeadTailBuffer:
        # The agent split the stream as HeadTailBuffer does: written in order, head then
        # tail, they land where they were; the true size is the agent's count.
        kept = HeadTailBuffer(self.cap)
        for channel in channels:
            kept.write(bytes(self.kept[channel]))
        kept.total = max(total, kept.total)
        return kept

    def _empty(self, elapsed: float) -> ExecResult:
        """The caller's deadline cut the command and the agent never answered."""
        return ExecResult(
            exit_code=None,
            stdout=b"",
            stderr=b"",
            stdout_bytes=0,
            stderr_bytes=0,
            stdout_truncated=False,
            stderr_truncated=False,
            timed_out=True,
            duration_seconds=elapsed,
        )
