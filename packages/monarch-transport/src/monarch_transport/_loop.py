"""The event loop the runtime runs on: uvloop where it is installed (it is a
dependency on Linux), whose callbacks and socket I/O cost a fraction of the
standard loop's; the standard loop otherwise. Every backend works on both."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["new_event_loop", "preload", "run"]

T = TypeVar("T")


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A new event loop: uvloop's when uvloop is installed, the standard one otherwise."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def preload() -> None:
    """Import what ``new_event_loop`` will use (uvloop, when installed) now,
    without making a loop. A fork server calls it before it forks, so that
    each proc it starts inherits the module instead of importing it (a few
    milliseconds of CPU a proc)."""
    with contextlib.suppress(ImportError):
        import uvloop  # noqa: F401


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` on the loop ``new_event_loop`` makes.

    Args:
        main: the coroutine to run to completion.

    Returns:
        What ``main`` returns.
    """
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        return runner.run(main)


def wake(waiter: asyncio.Future[None]) -> None:
    """Settle ``waiter`` unless it is settled already (a cancelled wait, or a
    second wake-up for the same reason)."""
    if not waiter.done():
        waiter.set_result(None)
