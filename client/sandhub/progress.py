"""Progress of a transfer: what sync and cp report to, and a rich progress bar for the CLI.

Sync calls `start` once per transfer with the bytes it expects, `advance` as bytes go, and
`finish` at the end (also on errors). Anything with these three methods will do (the MCP
server passes None: no display).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # rich is imported when a bar is shown: most commands never show one
    from rich.progress import Progress, TaskID

# Below this a bar would flash by: not worth the noise.
BAR_FROM_BYTES = 4 * 1024 * 1024


class TransferProgress(Protocol):
    def start(self, label: str, total_bytes: int) -> None: ...

    def advance(self, nbytes: int) -> None: ...

    def finish(self) -> None: ...


class Bar:
    """A rich progress bar on stderr, only when stderr is a terminal and the transfer is
    large enough to watch."""

    def __init__(self, *, force: bool = False) -> None:
        self._force = force
        self._progress: Progress | None = None
        self._task: TaskID | None = None

    def start(self, label: str, total_bytes: int) -> None:
        self.finish()
        if not self._force and (not sys.stderr.isatty() or total_bytes < BAR_FROM_BYTES):
            return
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
            TransferSpeedColumn,
        )

        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            TimeRemainingColumn(),
            console=Console(stderr=True),
            transient=True,
        )
        self._progress.start()
        self._task = self._progress.add_task(label, total=total_bytes)

    def advance(self, nbytes: int) -> None:
        if self._progress is not None and self._task is not None:
            self._progress.advance(self._task, nbytes)

    def finish(self) -> None:
        if self._progress is not None:
            self._progress.stop()
        self._progress = self._task = None
