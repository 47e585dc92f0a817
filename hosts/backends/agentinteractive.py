"""Terminals and shell sessions through the sandbox agent, for every kind of host (mixed into
AgentFirstBackend; the interface is hosts/backends/interactive.py).

Each terminal or shell session is a holder process in the sandbox (agent/inside/holder.py),
reached by its id through any agent of the sandbox, so it outlives the agent, the web process
and the browser tab. Holders listen in `terminal_dir(state)`: a directory private to the
sandbox user (0700) outside /workspace, so file lists and downloads never show it.

A shell session's run is an ordinary exec of a small client (agent/inside/shellclient.py)
that hands the command to the session's holder and relays its stdin, stdout, stderr and
status: the output cap, live output, stdin, timeout, cancel and sweep are exec's own.

Without the agent (an image without python3, the agent turned off) there are none:
Unsupported, saying what would give them.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from hosts.backends.agent import terminals
from hosts.backends.agent.client import AgentClient, AgentUnavailable
from hosts.backends.agent.inside import shellclient
from hosts.backends.agent.link import AgentLink
from hosts.backends.base import (
    BackendError,
    ExecResult,
    OutputCallback,
    TerminalInfo,
    TerminalStream,
    Unsupported,
)

__all__ = ["AgentInteractive"]

T = TypeVar("T")

DEFAULT_TERMINAL_DIR = "/tmp/.sandhub-terminals"
WORKSPACE = "/workspace"
CLIENT_PYTHON = "python3"  # readable, as any command's: the run's client is a command
LIVE_ALL = 1 << 62
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@functools.cache
def _client_source() -> str:
    return Path(shellclient.__file__).read_text()


class AgentInteractive:
    """The interactive methods of the interface, through the sandbox agent."""

    agents: AgentLink

    def agent_on(self) -> bool:  # AgentFirstBackend's
        raise NotImplementedError

    def terminal_dir(self, state: dict[str, Any]) -> str:
        """Where the sandbox's holders listen, as the sandbox sees it (a kind whose /tmp is
        shared with other sandboxes names a private directory of its own)."""
        return DEFAULT_TERMINAL_DIR

    def _through_agent(
        self, state: dict[str, Any], operation: Callable[[AgentClient], T], *, once: bool = False
    ) -> T:
        what = "terminals and shell sessions"
        if not self.agent_on():
            raise Unsupported(
                f"{what} need the sandbox agent, which is turned off for this host "
                "(the SANDHUB_AGENT setting or the host's `agent` option)"
            )
        try:
            if once:
                return self.agents.call(state, operation)
            return self.agents.idempotent(state, operation)
        except AgentUnavailable as exc:
            raise Unsupported(
                f"{what} need python3 in the sandbox's image (the sandbox agent runs on it): {exc}"
            ) from exc

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
        terminals.check_id(terminal_id)
        directory = self.terminal_dir(state)
        cwd = self.agents.place.host_path(state, WORKSPACE)
        full_env = self.agents.place.environment(state, env)

        def start(client: AgentClient) -> None:
            try:
                terminals.open_(
                    client,
                    directory,
                    terminal_id,
                    mode="terminal",
                    cwd=cwd,
                    env=full_env,
                    cols=cols,
                    rows=rows,
                    idle=idle_timeout,
                )
            except FileExistsError as exc:
                raise BackendError(f"a terminal {terminal_id} is open already") from exc

        self._through_agent(state, start, once=True)

    def attach_terminal(
        self, state: dict[str, Any], terminal_id: str, timeout: float = 5.0
    ) -> TerminalStream:
        terminals.check_id(terminal_id)
        directory = self.terminal_dir(state)
        return self._through_agent(
            state, lambda client: terminals.attach(client, directory, terminal_id, timeout)
        )

    def close_terminal(self, state: dict[str, Any], terminal_id: str) -> bool:
        terminals.check_id(terminal_id)
        directory = self.terminal_dir(state)
        return self._through_agent(
            state, lambda client: terminals.close(client, directory, terminal_id)
        )

    def list_terminals(self, state: dict[str, Any]) -> list[TerminalInfo]:
        directory = self.terminal_dir(state)
        return self._through_agent(state, lambda client: terminals.listing(client, directory))

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
        terminals.check_id(session)
        for name in env:
            if not _ENV_NAME.match(name):
                raise BackendError(f"{name[:60]!r} cannot be a shell variable's name")
        directory = self.terminal_dir(state)
        socket = f"{directory}/{session}.sock"
        request = json.dumps({"command": command, "env": dict(env)}).encode()
        blob = len(request).to_bytes(4, "big") + request + (stdin or b"")
        argv = [CLIENT_PYTHON, "-I", "-S", "-c", _client_source(), socket]
        for attempt in range(2):
            self._ensure_session(state, session, directory, idle_timeout)
            result = self.agents.exec(
                state,
                argv,
                live_limit=LIVE_ALL,
                cwd=WORKSPACE,
                env={},
                timeout=timeout,
                output_cap=output_cap,
                on_output=None if on_output is None else _hide_missing(on_output),
                stdin=blob,
            )
            missing = result.exit_code == shellclient.MISSING
            if not (missing and result.stderr == shellclient.MISSING_TEXT) or attempt:
                return result
        raise AssertionError("unreachable")

    def _ensure_session(
        self, state: dict[str, Any], session: str, directory: str, idle_timeout: float
    ) -> None:
        """The session's holder runs (started in /workspace if it did not)."""
        cwd = self.agents.place.host_path(state, WORKSPACE)
        env = self.agents.place.environment(state, {})
        running = self._through_agent(
            state,
            lambda client: terminals.open_(
                client,
                directory,
                session,
                mode="shell",
                cwd=cwd,
                env=env,
                idle=idle_timeout,
                exist_ok=True,
            ),
        )
        if running.get("kind", "shell") != "shell":
            raise BackendError(f"{session} is a terminal's id, not a shell session's")


def _hide_missing(on_output: OutputCallback) -> OutputCallback:
    """The caller's live output, without the client's note that the holder was missing (the
    run is then tried again: nothing of the first try ran)."""

    def forward(stream: str, chunk: bytes) -> None:
        if chunk != shellclient.MISSING_TEXT:
            on_output(stream, chunk)

    return forward
