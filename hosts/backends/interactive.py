"""Terminals, shell sessions and usage samples: the interactive part of the backend interface
(SandboxBackend inherits it; base.py re-exports what is here).

A terminal is a PTY running the sandbox user's shell, held by a small process of its own in
the sandbox (the holder), so it outlives the agent's stream, the web process and the browser
tab: a client attaches by id, gets the scrollback the holder kept, then the output as it
comes, and detaches without ending it. Several clients may attach at once (each sees the
output; each may type). A shell session is the same kind of holder running a shell on pipes
for an agent's `run_command(session=...)`: cwd, variables, functions, aliases and options
carry over between calls. Both end when their shell exits, when closed, or after
`idle_timeout` seconds with no client attached and no input.

The defaults say the kind has none (a backend without the agent, an image without python3).
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, Any

from hosts.backends.errors import Unsupported

if TYPE_CHECKING:
    from hosts.backends.types import ExecResult, OutputCallback, TerminalInfo, UsageSample

__all__ = ["InteractiveMethods", "TerminalStream"]


class TerminalStream(abc.ABC):
    """A client attached to a terminal. One thread may read while another writes; memory is
    bounded both ways as a PortStream's. Errors after attaching are BackendError."""

    @abc.abstractmethod
    def read(self, max_bytes: int = 65536, timeout: float | None = None) -> bytes:
        """Output as soon as any is there (first the scrollback); b"" once the terminal ended
        (its shell exited or it was closed). TimeoutError when nothing came in `timeout`."""

    @abc.abstractmethod
    def write(self, data: bytes) -> None:
        """Keystrokes (or pasted text) to the terminal's input."""

    @abc.abstractmethod
    def resize(self, cols: int, rows: int) -> None:
        """The window's size in characters (the shell's programs get SIGWINCH)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Detach (the terminal runs on); idempotent, never raises."""

    def __enter__(self) -> TerminalStream:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class InteractiveMethods:
    kind: str

    # --- terminals ---------------------------------------------------------------------------
    def open_terminal(
        self,
        state: dict[str, Any],
        terminal_id: str,
        *,
        cols: int,
        rows: int,
        env: dict[str, str],
        idle_timeout: float,
    ) -> None:
        """Start a terminal (`terminal_id`: [a-z0-9-], unique in the sandbox) running the
        sandbox user's login shell in /workspace, TERM=xterm-256color. Returns once it can be
        attached. BackendError if one of that id runs already."""
        raise Unsupported(f"sandboxes on {self.kind} hosts have no terminals")

    def attach_terminal(
        self, state: dict[str, Any], terminal_id: str, timeout: float = 5.0
    ) -> TerminalStream:
        """Attach to a running terminal. TerminalGone if none of that id runs."""
        raise Unsupported(f"sandboxes on {self.kind} hosts have no terminals")

    def close_terminal(self, state: dict[str, Any], terminal_id: str) -> bool:
        """End a terminal or shell session (its shell and everything it started); False if
        none of that id ran. Idempotent."""
        raise Unsupported(f"sandboxes on {self.kind} hosts have no terminals")

    def list_terminals(self, state: dict[str, Any]) -> list[TerminalInfo]:
        """The terminals and shell sessions running in the sandbox."""
        raise Unsupported(f"sandboxes on {self.kind} hosts have no terminals")

    # --- shell sessions ----------------------------------------------------------------------
    def run_in_shell(
        self,
        state: dict[str, Any],
        session: str,
        command: str,
        *,
        env: dict[str, str],
        timeout: float,
        output_cap: int,
        idle_timeout: float,
        on_output: OutputCallback | None = None,
        stdin: bytes | None = None,
    ) -> ExecResult:
        """Run shell text in the sandbox's long-lived shell named `session` ([a-z0-9-]),
        started in /workspace on first use (then it is listed as kind "shell"). `env` is
        exported in that shell before the command (it stays). What the command prints and
        its status come back as exec's; a timeout kills what the command started and the
        shell lives on, unless the command was the shell's own (a builtin loop): then the
        shell is restarted, and stderr says its state was lost."""
        raise Unsupported(f"sandboxes on {self.kind} hosts have no shell sessions")

    # --- usage -------------------------------------------------------------------------------
    def sample_usage(self, state: dict[str, Any]) -> UsageSample:
        """What the sandbox uses now (its cgroup: CPU time, memory, pids; its workspace's
        disk). SandboxGone, or BackendError when it cannot be read."""
        raise Unsupported(f"sandboxes on {self.kind} hosts report no usage")
