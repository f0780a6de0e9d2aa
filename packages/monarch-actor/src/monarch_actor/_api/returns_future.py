"""``returns_future``: an ``async def`` whose call returns a Monarch ``Future``
without starting it; the first ``await`` runs it on the awaiting loop, the
first ``get()`` on a private loop of the calling thread."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import inspect
import threading
from collections.abc import Callable, Coroutine, Generator
from typing import Any, ParamSpec, TypeVar

from .._core.future import INTERNAL, Future

__all__ = ["returns_future"]

P = ParamSpec("P")
R = TypeVar("R")


class _Expired(Exception):
    """The caller's timeout passed before the body finished."""


class _LazyFuture(Future[R]):
    """A future whose work starts when someone first waits for it."""

    __slots__ = ("_coro", "_lock", "_started")

    def __init__(self, coro: Coroutine[Any, Any, R]) -> None:
        cf: concurrent.futures.Future[R] = concurrent.futures.Future()
        super().__init__(INTERNAL, cf)
        self._coro = coro
        self._lock = threading.Lock()
        self._started = False

    def _claim(self) -> bool:
        with self._lock:
            first, self._started = not self._started, True
            return first

    def get(self, timeout: float | None = None) -> R:
        if self._claim():
            self._run_here(timeout)
        return super().get(timeout)

    result = get

    def _run_here(self, timeout: float | None) -> None:
        async def bounded() -> R:
            task = asyncio.ensure_future(self._coro)
            done, _ = await asyncio.wait({task}, timeout=timeout)
            if not done:  # our deadline, not a TimeoutError of the body's own
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
                raise _Expired
            return task.result()

        try:
            self._cf.set_result(asyncio.run(bounded()))
        except _Expired:
            self._cf.set_exception(TimeoutError(f"the result did not arrive within {timeout} s"))
        except BaseException as error:
            self._cf.set_exception(error)

    def _start_on_loop(self) -> None:
        if self._claim():
            task = asyncio.get_running_loop().create_task(self._coro)
            task.add_done_callback(self._settle)

    def _settle(self, task: asyncio.Task[R]) -> None:
        if task.cancelled():
            self._cf.cancel()
        elif (error := task.exception()) is not None:
            self._cf.set_exception(error)
        else:
            self._cf.set_result(task.result())

    def __await__(self) -> Generator[Any, None, R]:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            raise ValueError(
                "__await__ with no active event loop: use future.get() in synchronous code"
            ) from None
        self._start_on_loop()
        return super().__await__()

    def as_asyncio(self) -> asyncio.Future[R]:
        fut = super().as_asyncio()
        self._start_on_loop()
        return fut


def returns_future(fn: Callable[P, Coroutine[Any, Any, R]]) -> Callable[P, Future[R]]:
    """Decorate an ``async def`` so that calling it returns a Monarch ``Future``.

    The call does not start the coroutine: the first ``await`` runs it on the
    awaiting loop, the first ``get()`` on a private loop of the calling thread.

    Args:
        fn: the ``async def`` function.

    Raises:
        TypeError: ``fn`` is not an ``async def`` function.
    """
    if not inspect.iscoroutinefunction(fn):
        raise TypeError(f"returns_future decorates an async def function, got {fn!r}")

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> Future[R]:
        return _LazyFuture(fn(*args, **kwargs))

    return wrapper
