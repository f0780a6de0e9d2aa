"""Calling the blocking ``AdminClient`` from textual's event loop."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


async def _off_loop(fn: Callable[[], T]) -> T:
    """Run a blocking call in a daemon thread: quitting never waits for a
    request to a server that stopped answering."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()

    def deliver(result: T | None, error: BaseException | None) -> None:
        if done.cancelled():
            return
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(result)  # type: ignore[arg-type]

    def work() -> None:
        try:
            result = fn()
        except BaseException as error:
            loop.call_soon_threadsafe(deliver, None, error)
        else:
            loop.call_soon_threadsafe(deliver, result, None)

    threading.Thread(target=work, name="monarch-tui-fetch", daemon=True).start()
    return await done
