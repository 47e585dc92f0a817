"""Terminals and shell sessions for the in-memory backend (tests/fakes.py): a terminal echoes
what is typed (as a PTY with echo on, running `cat`), keeps it all as its scrollback, and
answers `stty size`; a shell session understands `cd`, `export`, `echo`, `pwd` and `cat`
(its stdin), separated by `;`, with its cwd and variables kept between calls."""

from __future__ import annotations

import shlex
import threading
import time
from typing import Any

from hosts.backends.base import (
    BackendError,
    ExecResult,
    TerminalGone,
    TerminalInfo,
    TerminalStream,
)


class FakeTerminal:
    def __init__(self, cols: int, rows: int) -> None:
        self.output = bytearray()  # everything printed: the scrollback (never trimmed here)
        self.cols, self.rows = cols, rows
        self.typed = bytearray()
        self.ended = False
        self.attached = 0
        self.streams: list[FakeTerminalStream] = []  # every client that attached
        self.started = time.time()
        self.changed = threading.Condition()

    def print(self, data: bytes) -> None:
        with self.changed:
            self.output += data
            self.changed.notify_all()

    def end(self) -> None:
        with self.changed:
            self.ended = True
            self.changed.notify_all()


class FakeTerminalStream(TerminalStream):
    def __init__(self, terminal: FakeTerminal) -> None:
        self.terminal, self.offset, self.closed = terminal, 0, False
        terminal.attached += 1
        terminal.streams.append(self)

    def read(self, max_bytes: int = 65536, timeout: float | None = None) -> bytes:
        term = self.terminal
        with term.changed:
            waited = term.changed.wait_for(
                lambda: self.closed or term.ended or len(term.output) > self.offset, timeout
            )
            if not waited:
                raise TimeoutError(f"nothing came within {timeout} s")
            if self.closed:
                raise BackendError("the stream is closed")
            data = bytes(term.output[self.offset : self.offset + max_bytes])
            self.offset += len(data)
            return data  # b"" once ended and all was read

    def write(self, data: bytes) -> None:
        term = self.terminal
        if term.ended or self.closed:
            raise BackendError("the terminal ended")
        term.typed += data
        echo = data.replace(b"\r", b"\r\n")
        term.print(echo)
        if b"stty size\r" in bytes(term.typed):
            term.typed.clear()
            term.print(f"{term.rows} {term.cols}\r\n".encode())

    def resize(self, cols: int, rows: int) -> None:
        self.terminal.cols, self.terminal.rows = cols, rows

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.terminal.attached -= 1
            with self.terminal.changed:
                self.terminal.changed.notify_all()


class FakeShell:
    def __init__(self) -> None:
        self.cwd, self.env, self.started = "/workspace", {}, time.time()

    def run(self, text: str, stdin: bytes | None) -> tuple[bytes, int]:
        out, code = b"", 0
        for part in text.split(";"):
            words = shlex.split(part)
            if not words:
                continue
            head, args = words[0], [self.expand(w) for w in words[1:]]
            if head == "cd":
                self.cwd = args[0] if args else "/workspace"
            elif head == "export":
                name, _, value = args[0].partition("=")
                self.env[name] = value
            elif head == "echo":
                out += " ".join(args).encode() + b"\n"
            elif head == "pwd":
                out += self.cwd.encode() + b"\n"
            elif head == "cat":
                out += stdin or b""
            else:
                return out, 127
        return out, code

    def expand(self, word: str) -> str:
        if word == "$PWD":
            return self.cwd
        return self.env.get(word[1:], "") if word.startswith("$") else word


class FakeTerminals:
    """The mixin: terminals and shells live in the box (gone with the sandbox)."""

    terminal_calls: list[tuple[str, str]] = []

    def _terminals(self, state: dict[str, Any]) -> dict[str, Any]:
        box = self._running_box(state)  # type: ignore[attr-defined]
        return box.setdefault("terminals", {})

    def open_terminal(self, state, terminal_id, *, cols, rows, env, idle_timeout) -> None:
        terminals = self._terminals(state)
        if terminal_id in terminals:
            raise BackendError(f"a terminal {terminal_id} runs already")
        self.terminal_calls.append(("open", terminal_id))
        terminals[terminal_id] = FakeTerminal(cols, rows)
        terminals[terminal_id].print(b"$ ")

    def attach_terminal(self, state, terminal_id, timeout=5.0) -> TerminalStream:
        found = self._terminals(state).get(terminal_id)
        if not isinstance(found, FakeTerminal) or found.ended:
            raise TerminalGone(f"no terminal {terminal_id} runs")
        return FakeTerminalStream(found)

    def close_terminal(self, state, terminal_id) -> bool:
        found = self._terminals(state).pop(terminal_id, None)
        self.terminal_calls.append(("close", terminal_id))
        if isinstance(found, FakeTerminal):
            found.end()
        return found is not None

    def list_terminals(self, state) -> list[TerminalInfo]:
        return [
            TerminalInfo(
                terminal_id=key,
                kind="terminal" if isinstance(value, FakeTerminal) else "shell",
                pid=1,
                started_at=value.started,
                last_activity=time.time(),
                attached=getattr(value, "attached", 0),
            )
            for key, value in self._terminals(state).items()
        ]

    def run_in_shell(
        self,
        state,
        session,
        command,
        *,
        env,
        timeout,
        output_cap,
        idle_timeout,
        on_output=None,
        stdin=None,
    ) -> ExecResult:
        shell = self._terminals(state).setdefault(session, FakeShell())
        shell.env.update(env)
        started = time.monotonic()
        out, code = shell.run(command, stdin)
        if on_output and out:
            on_output("stdout", out)
        return ExecResult(
            exit_code=code,
            stdout=out[:output_cap],
            stderr=b"",
            stdout_bytes=len(out),
            stderr_bytes=0,
            stdout_truncated=len(out) > output_cap,
            stderr_truncated=False,
            timed_out=False,
            duration_seconds=time.monotonic() - started,
        )
