"""The results of terminals and shell sessions (sandboxes/services/terminals.py, shells.py)."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from pydantic import Field

from sandboxes.contract.results import Result

if TYPE_CHECKING:
    from sandboxes.models import Terminal


class TerminalResult(Result):
    """A terminal (a PTY in the sandbox a person types in) or an agent's shell session."""

    id: str = Field(description="the terminal's id (random; the terminal page's URL names it)")
    sandbox_id: str
    kind: str = Field(description="terminal or shell (a shell session of run_command)")
    name: str = Field(description="a shell session's name; empty for a terminal")
    opened_by: str | None
    channel: str = Field(description="where it was opened: web, api, mcp")
    created_at: datetime
    last_seen_at: datetime = Field(description="the last attach, input or command")
    closed_at: datetime | None = Field(description="null while it is open")
    close_reason: str

    @classmethod
    def from_model(cls, terminal: Terminal) -> TerminalResult:
        return cls.read(
            terminal,
            id=terminal.terminal_id,
            sandbox_id=terminal.sandbox.public_id,
            opened_by=terminal.opened_by.get_username() if terminal.opened_by else None,
        )

    @property
    def open(self) -> bool:
        return self.closed_at is None


class SessionResult(Result):
    """A shell session: run_command(session=name) runs in it, keeping cwd and variables."""

    name: str
    sandbox_id: str
    opened_by: str | None
    created_at: datetime
    last_seen_at: datetime = Field(description="when it last ran a command")

    @classmethod
    def from_model(cls, terminal: Terminal) -> SessionResult:
        return cls.read(
            terminal,
            sandbox_id=terminal.sandbox.public_id,
            opened_by=terminal.opened_by.get_username() if terminal.opened_by else None,
        )


__all__ = ["SessionResult", "TerminalResult"]
