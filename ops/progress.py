"""A progress bar for long commands (`audit --recheck`, `reproduce`, `run start --spawn`): rich, on stderr,
only on a terminal and never with `--json` (stdout stays machine-readable, logs stay free of redraws).

Off, every method does nothing, so callers never test whether to draw.
"""

from __future__ import annotations

import sys
from types import TracebackType
from typing import Any


class ProgressBar:
    """`label ━━━━━━╸━━━━ 3/8 0:00:12 note`; use as a context manager, `advance` or `update` as work ends."""

    def __init__(self, total: int, label: str, *, quiet: bool = False, enabled: bool | None = None) -> None:
        self.total = total
        self.label = label
        self.enabled = (not quiet and sys.stderr.isatty()) if enabled is None else enabled
        self._progress: Any = None
        self._task: Any = None

    def __enter__(self) -> ProgressBar:
        return self.start()

    def start(self) -> ProgressBar:
        """Draw the bar (when enabled); `close` ends it. The context manager does both."""
        if self.enabled and self._progress is None:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )

            self._progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("{task.fields[note]}"),
                console=Console(stderr=True),
            )
            self._progress.start()
            self._task = self._progress.add_task(self.label, total=self.total, note="")
        return self

    def advance(self, note: str = "") -> None:
        if self._progress is not None:
            self._progress.update(self._task, advance=1, note=note)

    def update(self, completed: int, note: str = "", total: int | None = None) -> None:
        if self._progress is not None:
            if total is not None:
                self.total = total
            self._progress.update(self._task, completed=completed, total=self.total, note=note)

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
