"""One command, from spawn until nothing of it is left (part 3 of the agent).

The command runs in a session of its own (setsid) with the exec marker in its environment.
Its output is read as it comes: kept head and tail up to the request's cap (the true sizes
counted), and sent live (class Live) up to the request's `live` bytes a stream, then sampled.
When it ends, whatever
still holds its output pipes is swept (a young holder is spared a moment: `cmd >log &` holds
them until its redirection). On timeout or cancel, its process group gets SIGTERM, then after
`kill_after` seconds (or as soon as the command itself is gone) everything of it is swept:
its session, what carries its marker, what holds its pipes.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import time
from typing import TYPE_CHECKING, Any

from .constants import (
    CH_STDERR,
    CH_STDERR_HEAD,
    CH_STDERR_TAIL,
    CH_STDOUT,
    CH_STDOUT_HEAD,
    CH_STDOUT_TAIL,
    ERR_INVALID,
    MARKER_ENV,
)
from .oom import oom_killed, oom_kills, oom_note
from .procs import SPARE_SECONDS, HeadTail, exit_code, holds, marked, signal_quietly, sweep
from .wire import Reaper, Refusal, Request

if TYPE_CHECKING:
    from .procs import ProcStat

READ_SIZE = 64 * 1024
SETTLE_SECONDS = 2.0  # after a sweep, how long a pipe nobody should hold is still read
LINGER_SECONDS = 0.1  # output still coming this long after the command ended: swept
LIVE_TICK = 0.25  # past the live budget, the latest LIVE_SAMPLE bytes are sent this often
LIVE_SAMPLE = 4096


class Command:
    """An exec request: run() returns the RESULT body; the kept output goes to the outbox."""

    def __init__(self, request: Request, reaper: Reaper, base_env: dict[str, str]) -> None:
        args = request.args
        self.request, self.reaper = request, reaper
        self.argv = [str(part) for part in args["argv"]]
        if not self.argv:
            raise Refusal(ERR_INVALID, "empty command")
        self.cwd = str(args.get("cwd") or "/")
        self.timeout = float(args["timeout"])
        self.kill_after = float(args.get("kill_after", 2.0))
        self.marker = str(args["marker"])
        if not self.marker.isalnum():
            raise Refusal(ERR_INVALID, "the marker must be letters and digits")
        cap = max(int(args["cap"]), 0)
        self.kept = {CH_STDOUT: HeadTail(cap), CH_STDERR: HeadTail(cap)}
        self.live = Live(request, max(int(args.get("live", 0)), 0))
        self.env = dict(base_env)
        self.env.update({str(k): str(v) for k, v in (args.get("env") or {}).items()})
        self.env[MARKER_ENV] = self.marker
        self.env["PWD"] = self.cwd  # as a shell that changed directory exports it
        self.status: int | None = None
        self.started = self.ended = time.monotonic()
        self.oom_before: int | None = None

    def exited(self, status: int) -> None:
        """Called by the reaper's thread."""
        self.ended = time.monotonic()
        self.status = status
        self.request.poke()

    def run(self) -> dict[str, Any]:
        if not os.path.isdir(self.cwd):
            return self.failed(126, f"cannot change directory to {self.cwd}: not a directory")
        stdin = subprocess.PIPE if self.request.args.get("stdin") else subprocess.DEVNULL
        self.oom_before = oom_kills()
        try:
            child = self.reaper.spawn(
                self.exited,
                self.argv,
                cwd=self.cwd,
                env=self.env,
                start_new_session=True,
                stdin=stdin,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
        except ValueError as exc:  # a NUL byte in an argument or the environment
            raise Refusal(ERR_INVALID, str(exc)) from None
        except OSError as exc:  # as a shell says it: 127 not found, 126 found but not run
            code = 127 if exc.errno == 2 and exc.filename != self.cwd else 126
            return self.failed(code, f"cannot run {exc.filename}: {exc.strerror}")
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_r, False)
        os.set_blocking(wake_w, False)
        with self.request.cond:
            self.request.wake_fd = wake_w
        try:
            return self.pump(child, wake_r)
        finally:
            with self.request.cond:
                self.request.wake_fd = -1
            os.close(wake_r)
            os.close(wake_w)
            for stream in (child.stdin, child.stdout, child.stderr):
                if stream is not None:
                    stream.close()

    def failed(self, code: int, message: str) -> dict[str, Any]:
        self.kept[CH_STDERR].write(f"sandhub: {message}\n".encode())
        return self.finish(code, "", True)

    def pump(self, child: subprocess.Popen, wake_r: int) -> dict[str, Any]:
        assert child.stdout is not None and child.stderr is not None
        pipes = {child.stdout.fileno(): CH_STDOUT, child.stderr.fileno(): CH_STDERR}
        links = {f"pipe:[{os.fstat(fd).st_ino}]" for fd in pipes}
        needle = f"\0{MARKER_ENV}={self.marker}\0".encode()
        pid = child.pid

        def everything(other: int, info: ProcStat) -> bool:
            return info[3] == pid or marked(other, needle) or holds(other, links)

        poller = select.poll()
        for fd in [*pipes, wake_r]:
            poller.register(fd, select.POLLIN)
        feed = Feed(self.request, child.stdin, poller)
        deadline = self.started + self.timeout
        reason, kill_at, swept = "", 0.0, True
        settled: float | None = None  # set once swept: open pipes are read this long at most
        while pipes or self.status is None:
            feed.arm()  # first thing: input may have come before the wake-up pipe was set
            now = time.monotonic()
            stop = self.request.cancelled or now >= deadline
            if stop and not reason and self.status is None:
                reason = "cancel" if self.request.cancelled else "timeout"
                signal_quietly(-pid, signal.SIGTERM)
                kill_at = now + self.kill_after
            if reason and settled is None and (self.status is not None or now >= kill_at):
                swept = sweep(everything)
                settled = time.monotonic() + SETTLE_SECONDS
            if settled is not None and time.monotonic() > settled:
                break
            wait = 0.02 if reason or self.status is not None else deadline - now
            events = poller.poll(int(max(0.0, min(wait, self.live.wait(now))) * 1000) + 1)
            lingering = not events or time.monotonic() - self.ended > LINGER_SECONDS
            if lingering and self.status is not None and pipes and settled is None:
                # The command ended, and what still holds its output would keep us waiting
                # (quiet, or writing on and on).
                swept = sweep(lambda other, info: holds(other, links), now + SPARE_SECONDS)
                settled = time.monotonic() + SETTLE_SECONDS
            for fd, _ in events:
                if fd == wake_r:
                    os.read(wake_r, 4096)
                elif fd in pipes:
                    self.output(fd, pipes, poller)
                else:
                    feed.write()
            self.live.flush(time.monotonic())
        if reason and settled is None:
            # Stopped, and its pipes closed as soon as it died: the loop ended before its
            # sweep, and what left the session with the marker (setsid cmd >file &) is alive.
            swept = sweep(everything)
        feed.close()
        self.live.flush(time.monotonic(), force=True)
        if self.status is None:  # everything was killed, yet its status never came
            return self.finish(None, reason, swept)
        code = exit_code(self.status)
        if reason == "timeout":  # as coreutils `timeout -k` says it: SIGTERM sufficed, or not
            code = 124 if self.ended < kill_at else 137
        elif not reason and oom_killed(code, self.oom_before):
            note = oom_note()  # 137 alone does not say why
            self.kept[CH_STDERR].write(note)
            self.live.feed(CH_STDERR, note)
            self.live.flush(time.monotonic(), force=True)
        return self.finish(code, reason, swept)

    def output(self, fd: int, pipes: dict[int, int], poller: Any) -> None:
        channel = pipes[fd]
        chunk = os.read(fd, READ_SIZE)
        if not chunk:
            poller.unregister(fd)
            del pipes[fd]
            return
        self.kept[channel].write(chunk)
        self.live.feed(channel, chunk)

    def finish(self, code: int | None, reason: str, swept: bool) -> dict[str, Any]:
        wire, rid = self.request.wire, self.request.rid
        for stream, head, tail in (
            (CH_STDOUT, CH_STDOUT_HEAD, CH_STDOUT_TAIL),
            (CH_STDERR, CH_STDERR_HEAD, CH_STDERR_TAIL),
        ):
            kept = self.kept[stream]
            self.request.outbox += wire.data(rid, head, bytes(kept.head))
            self.request.outbox += wire.data(rid, tail, bytes(kept.tail))
        return {
            "exit_code": code,
            "timed_out": reason == "timeout",
            "cancelled": reason == "cancel",
            "swept": swept,
            "stdout_bytes": self.kept[CH_STDOUT].total,
            "stderr_bytes": self.kept[CH_STDERR].total,
            "duration": time.monotonic() - self.started,
        }


class Live:
    """Output sent as it comes, up to a budget a stream. Past it, a sample: every LIVE_TICK
    the latest LIVE_SAMPLE bytes, after a note of how much was not shown, so a watcher sees
    a long command move while what it prints costs the platform next to nothing (the
    result still has the head and tail)."""

    def __init__(self, request: Request, budget: int) -> None:
        self.request, self.on = request, budget > 0
        self.left = {CH_STDOUT: budget, CH_STDERR: budget}
        self.unsent = {CH_STDOUT: 0, CH_STDERR: 0}
        self.recent = {CH_STDOUT: bytearray(), CH_STDERR: bytearray()}
        self.due = 0.0

    def feed(self, channel: int, chunk: bytes) -> None:
        if not self.on:
            return
        left = self.left[channel]
        if left > 0:
            self.left[channel] = left - len(chunk)
            wire = self.request.wire
            wire.send(wire.data(self.request.rid, channel, chunk[:left]))
            chunk = chunk[left:]
        if chunk:
            self.unsent[channel] += len(chunk)
            self.recent[channel] += chunk
            del self.recent[channel][:-LIVE_SAMPLE]

    def wait(self, now: float) -> float:
        """Seconds until a sample is due (a long time if none is pending)."""
        pending = any(self.recent.values())
        return max(0.0, self.due - now) if pending else 3600.0

    def flush(self, now: float, force: bool = False) -> None:
        if not any(self.recent.values()) or (now < self.due and not force):
            return
        wire, packets = self.request.wire, []
        for channel, recent in self.recent.items():
            if not recent:
                continue
            skipped = self.unsent[channel] - len(recent)
            if skipped:
                note = f"\n... [{skipped} bytes not shown live] ...\n".encode()
                packets += wire.data(self.request.rid, channel, note)
            packets += wire.data(self.request.rid, channel, bytes(recent))
            self.unsent[channel] = 0
            recent.clear()
        wire.send(packets)
        self.due = now + LIVE_TICK


class Feed:
    """The client's stdin data into the command's stdin pipe, never blocking the exec loop."""

    def __init__(self, request: Request, stream: Any, poller: Any) -> None:
        self.request, self.poller, self.stream = request, poller, stream
        self.pending = b""
        self.fd = stream.fileno() if stream is not None else -1
        self.armed = False
        if self.fd >= 0:
            os.set_blocking(self.fd, False)

    def arm(self) -> None:
        """Wait for the pipe to take data when there is some; close it at the end of input."""
        if self.fd < 0:
            return
        request = self.request
        with request.cond:
            if not self.pending and request.inbound:
                self.pending = request.inbound.popleft()
            at_end = not self.pending and request.eof
        if at_end:
            self.close()
        elif self.pending and not self.armed:
            self.poller.register(self.fd, select.POLLOUT)
            self.armed = True

    def write(self) -> None:
        try:
            count = os.write(self.fd, self.pending[:READ_SIZE])
        except BlockingIOError:
            return
        except OSError:  # the command closed its stdin: the rest of the input is dropped
            with self.request.cond:
                count = len(self.pending) + sum(len(chunk) for chunk in self.request.inbound)
                self.request.inbound.clear()
                self.request.eof = True
            self.pending = b""
            self.request.credit(count)
            self.close()
            return
        self.pending = self.pending[count:]
        self.request.credit(count)
        if not self.pending and self.armed:
            self.poller.unregister(self.fd)
            self.armed = False

    def close(self) -> None:
        if self.fd >= 0:
            if self.armed:
                self.poller.unregister(self.fd)
            self.stream.close()
            self.fd, self.armed = -1, False
