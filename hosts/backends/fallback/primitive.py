"""The one thing a kind provides for the per-command path: run an argv in a sandbox."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from hosts.backends.base import BackendError

__all__ = ["CouldNotStart", "Deadline", "Output", "PlainExec"]

# Called with ("stdout" or "stderr", chunk) as output comes.
Output = Callable[[str, bytes], None]


class Deadline(Exception):
    """The caller's deadline passed while the command still ran (it may run on: the caller
    kills it by its marker)."""


class CouldNotStart(BackendError):
    """No process could be made for the command (the sandbox's pids or memory are used up);
    trying again may work once some are free."""


class PlainExec(Protocol):
    """Runs one argv as the sandbox user, with no shell of the platform's around it."""

    # stdin larger than this is refused (Unsupported), None for no limit: Docker hands stdin
    # to the exec wrapper in an environment variable, SSH sends it over the channel.
    max_stdin: int | None

    def run(
        self,
        state: dict[str, Any],
        argv: list[str],
        *,
        env: dict[str, str],
        stdin: bytes | None,
        deadline: float,
        output: Output,
        cwd: str | None = None,
    ) -> int | None:
        """argv as the sandbox user, with the sandbox's environment and `env`, from `cwd` (a
        path as the sandbox sees it; None: wherever the kind starts processes). Output goes to
        `output` as it comes; the exit code, or None when it ended without one. Deadline when
        `deadline` (time.monotonic()) passes first; CouldNotStart when no process could be
        made; SandboxGone when the sandbox is gone; BackendError for anything else."""
        ...
