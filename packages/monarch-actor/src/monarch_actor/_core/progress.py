"""Progress where a person waits (a large mesh starting, a job in a
scheduler's queue, a large transfer): a rich progress line on the terminal,
removed when done; nothing at all when standard error is not a terminal."""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator
from typing import Any

from .config import PROGRESS

__all__ = ["PROGRESS", "Progress", "progress", "shows_progress"]


def shows_progress() -> bool:
    """Whether progress lines are shown in this process now."""
    mode = PROGRESS.get()
    if mode == "auto":
        stream = sys.stderr
        return bool(getattr(stream, "isatty", None)) and stream.isatty()
    return mode == "always"


class Progress:
    """One progress line: ``update`` it as the work goes on (from any thread).

    ``progress()`` makes them.

    Args:
        bar: the rich ``Progress`` showing the line; ``None`` shows nothing.
        task: the line's task in ``bar``.
    """

    def __init__(self, bar: Any = None, task: Any = None) -> None:
        self._bar = bar
        self._task = task
        self._lock = threading.Lock()

    def update(
        self,
        *,
        completed: float | None = None,
        total: float | None = None,
        description: str | None = None,
    ) -> None:
        """Move the line on.

        Args:
            completed: how much is done, in the line's unit.
            total: how much there is to do, when it is known.
            description: new text for the line.
        """
        if self._bar is None:
            return
        changes: dict[str, Any] = {}
        if completed is not None:
            changes["completed"] = completed
        if total is not None:
            changes["total"] = total
        if description is not None:
            changes["description"] = description
        with self._lock:
            self._bar.update(self._task, **changes)

    def advance(self, amount: float) -> None:
        """Add ``amount`` to what is done (from any thread).

        Args:
            amount: how much more is done, in the line's unit.
        """
        if self._bar is None:
            return
        with self._lock:
            self._bar.advance(self._task, amount)


@contextlib.contextmanager
def progress(description: str, total: float | None = None, *, unit: str = "") -> Iterator[Progress]:
    """Show a progress line for the length of a ``with`` block.

    Args:
        description: what is being waited for.
        total: how much there is to do; ``None`` shows a spinner and the time.
        unit: ``"bytes"`` shows the amounts as sizes (MiB, GiB) and the
            rate; otherwise they are counts (``done/total``).

    Yields:
        The line, to ``update``; one that shows nothing when progress is off.
    """
    if not shows_progress():
        yield Progress()
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        MofNCompleteColumn,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
        TransferSpeedColumn,
    )
    from rich.progress import Progress as RichProgress

    columns: list[Any] = [SpinnerColumn(), TextColumn("{task.description}")]
    if total is not None and unit == "bytes":
        columns += [BarColumn(), DownloadColumn(binary_units=True), TransferSpeedColumn()]
    elif total is not None:
        columns += [BarColumn(), MofNCompleteColumn()]
    columns.append(TimeElapsedColumn())
    console = Console(stderr=True, force_terminal=PROGRESS.get() == "always" or None)
    with RichProgress(*columns, console=console, transient=True) as bar:
        yield Progress(bar, bar.add_task(description, total=total))
