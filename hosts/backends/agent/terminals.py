"""Terminals and shell sessions over the sandbox agent: the platform's side of the
terminal_* operations (protocol.py documents them; inside/terminals.py serves them).

An attached terminal is a `terminal_attach` request carried as a port stream is (ports.py:
the same windows both ways, so memory stays bounded whatever the terminal prints): read()
gives the terminal's output as the holder sends it (raw bytes, the scrollback first);
write() and resize() send the holder's input frames (inside/holder.py), one DATA frame each,
at once: a keystroke costs 5 bytes of framing, no JSON.
"""

from __future__ import annotations

import re
import struct
from functools import partial
from typing import Any

from hosts.backends.agent import protocol
from hosts.backends.agent.calls import Call
from hosts.backends.agent.client import AgentClient
from hosts.backends.agent.ports import AgentPortStream
from hosts.backends.base import BackendError, TerminalInfo, TerminalStream

__all__ = ["TERMINAL_ID", "AgentTerminalStream", "attach", "check_id", "close", "listing", "open_"]

TERMINAL_ID = re.compile(r"^[a-z0-9][a-z0-9-]{0,47}$")  # as the agent checks it
CALL_TIMEOUT = 30.0
_FRAME = struct.Struct("!BI")  # the holder's input frames: kind, length
_IN_DATA, _IN_RESIZE = 0, 1
_PIECE = protocol.CHUNK - _FRAME.size


def check_id(terminal_id: object) -> str:
    if not isinstance(terminal_id, str) or not TERMINAL_ID.match(terminal_id):
        raise BackendError(
            f"a terminal or session id is 1 to 48 of a-z, 0-9 and '-' (starting with a letter "
            f"or digit), not {str(terminal_id)[:60]!r}"
        )
    return terminal_id


class AgentTerminalStream(AgentPortStream, TerminalStream):
    """A client attached to a terminal (a `terminal_attach` request in flight)."""

    def __init__(self, client: AgentClient, rid: int, terminal_id: str) -> None:
        super().__init__(client, rid, port=0)
        self.terminal_id = terminal_id
        self.what = f"terminal {terminal_id}"
        self.app = f"terminal {terminal_id}"

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        for at in range(0, len(view), _PIECE):
            piece = bytes(view[at : at + _PIECE])
            AgentPortStream.write(self, _FRAME.pack(_IN_DATA, len(piece)) + piece)

    def resize(self, cols: int, rows: int) -> None:
        cols, rows = max(1, min(int(cols), 1000)), max(1, min(int(rows), 1000))
        AgentPortStream.write(self, _FRAME.pack(_IN_RESIZE, 4) + struct.pack("!HH", cols, rows))

    def __enter__(self) -> AgentTerminalStream:
        return self

    def __repr__(self) -> str:
        return f"<AgentTerminalStream {self.terminal_id} request {self.rid}>"


def open_(
    client: AgentClient,
    directory: str,
    terminal_id: str,
    *,
    mode: str,
    cwd: str,
    env: dict[str, str],
    cols: int = 80,
    rows: int = 24,
    idle: float = 0.0,
    exist_ok: bool = False,
) -> dict[str, Any]:
    """Start a holder; {"pid", "existed"}. FileExistsError if one of that id runs (and not
    exist_ok)."""
    body: dict[str, Any] = {
        "op": "terminal_open",
        "dir": directory,
        "id": check_id(terminal_id),
        "mode": mode,
    }
    body.update(cwd=cwd, env=dict(env), cols=cols, rows=rows, idle=idle, exist_ok=exist_ok)
    return _call(client, body).body


def attach(
    client: AgentClient, directory: str, terminal_id: str, timeout: float
) -> AgentTerminalStream:
    """Attach to a running terminal; TerminalGone if none of that id runs."""
    body = {"op": "terminal_attach", "dir": directory, "id": check_id(terminal_id)}
    make = partial(AgentTerminalStream, client, terminal_id=terminal_id)
    stream: AgentTerminalStream = client._open(body, make)
    stream.wait_open(timeout)
    return stream


def close(client: AgentClient, directory: str, terminal_id: str) -> bool:
    body = {"op": "terminal_close", "dir": directory, "id": check_id(terminal_id)}
    return bool(_call(client, body).body.get("closed"))


def listing(client: AgentClient, directory: str) -> list[TerminalInfo]:
    body = _call(client, {"op": "terminal_list", "dir": directory}).body
    return [
        TerminalInfo(
            terminal_id=str(row["id"]),
            kind=str(row["kind"]),
            pid=int(row["pid"]),
            started_at=float(row["started_at"]),
            last_activity=float(row["last_activity"]),
            attached=int(row["attached"]),
        )
        for row in body.get("terminals") or []
    ]


def _call(client: AgentClient, body: dict[str, Any]) -> Call:
    return client._call(body, lambda rid: Call(client, rid), CALL_TIMEOUT)
