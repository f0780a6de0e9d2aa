"""Monarch's ``Future``: one result, from plain code (``get``) or asyncio (``await``)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import math
import sys
import threading
import time
import warnings
from collections.abc import Callable, Generator
from typing import Any, Generic, TypeVar

from .reply import Reply, to_asyncio

__all__ = ["Future"]

R = TypeVar("R")
INTERNAL = object()  # the key only the runtime holds to make a Future
_MAIN_THREAD = threading.main_thread().ident
# Python runs signal handlers on the main thread, but a signal the kernel gives
# another thread does not wake it from a lock: `get()` there waits in slices
# this long, so that Ctrl-C raises KeyboardInterrupt at once, whichever thread
# received it (an actor's of the script's own process, say).
SIGNAL_CHECK = 0.2  # seconds


def _result_interruptibly(
    cf: concurrent.futures.Future[Any] | Reply[Any], timeout: float | None
) -> Any:
    """``cf.result(timeout)`` in slices of ``SIGNAL_CHECK``, between which
    Python runs the signal handlers that other threads received."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        left = SIGNAL_CHECK if deadline is None else min(SIGNAL_CHECK, deadline - time.monotonic())
        try:
            return cf.result(max(left, 0.0))
        except concurrent.futures.TimeoutError:
            if cf.done():
                # Settled after this slice timed out, or settled with a
                # TimeoutError of its own: either way its outcome is the answer.
                return cf.result(0)
            if deadline is not None and time.monotonic() >= deadline:
                raise


class Future(Generic[R]):
    """The result of an asynchronous operation.

    ``get()`` blocks the calling thread; ``await fut`` suspends an asyncio task.
    The result is kept: ``get()`` again returns the same value, and a failure
    raises the same exception every time.
    """

    __slots__ = ("_cf",)

    def __init__(self, *args: object, **kwargs: object) -> None:
        if len(args) != 2 or args[0] is not INTERNAL:
            raise TypeError(
                "Future objects are returned by Monarch operations and cannot be "
                "constructed directly."
            )
        self._cf: concurrent.futures.Future[R] | Reply[R] = args[1]  # type: ignore[assignment]

    @classmethod
    def _of(cls, cf: concurrent.futures.Future[Any] | Reply[Any]) -> Future[Any]:
        return cls(INTERNAL, cf)

    @classmethod
    def _done(cls, value: Any) -> Future[Any]:
        reply: Reply[Any] = Reply()
        reply.set_result(value)
        return cls(INTERNAL, reply)

    def get(self, timeout: float | None = None) -> R:
        """Wait for the result, blocking the calling thread.

        Called from inside a running event loop it warns, since it blocks the
        loop: use ``await`` there. Not from a notebook cell's (or an IPython
        prompt's) own code, which runs inside the kernel's loop although it
        is plain code: blocking there is what every other call in the cell does.

        Args:
            timeout: the most seconds to wait; ``None`` waits as long as it takes.

        Returns:
            The result; a failed operation raises its exception instead.

        Raises:
            TimeoutError: the result did not arrive in time (the operation goes on).
            ValueError: ``timeout`` is not a finite number >= 0.
        """
        if timeout is not None and (
            not isinstance(timeout, int | float) or timeout < 0 or not math.isfinite(timeout)
        ):
            raise ValueError(f"timeout must be a finite number of seconds >= 0, got {timeout!r}")
        if _loop_running_here() and not self._cf.done() and not _called_from_top_level():
            warnings.warn(
                "Future.get() was called from within an active event loop: it blocks the "
                "loop until the result arrives; use `await future` in async code instead",
                UserWarning,
                stacklevel=2,
            )
        try:
            if threading.get_ident() == _MAIN_THREAD and not self._cf.done():
                result: R = _result_interruptibly(self._cf, timeout)
                return result
            return self._cf.result(timeout)
        except concurrent.futures.TimeoutError:
            if self._cf.done():  # settled as the wait ended, or failed with a TimeoutError
                return self._cf.result(0)
            raise TimeoutError(f"the result did not arrive within {timeout} s") from None

    result = get
    """The same as ``get``."""

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """Wait, then return the failure instead of raising it (``None`` on success).

        Args:
            timeout: the most seconds to wait; ``None`` waits as long as it takes.

        Raises:
            TimeoutError: the operation did not finish in time.
        """
        try:
            self.get(timeout)
        except TimeoutError:
            if not self._cf.done():
                raise
            return self._cf.exception()
        except BaseException as error:
            return error
        return None

    def done(self) -> bool:
        """Whether the result (or failure) has arrived."""
        return self._cf.done()

    def add_done_callback(self, callback: Callable[[Future[R]], object]) -> None:
        """Call ``callback(self)`` once the future is done.

        Args:
            callback: called with this future on the thread that completes it,
                or at once on this thread if it is already done.
        """
        self._cf.add_done_callback(lambda _: callback(self))

    def as_asyncio(self) -> asyncio.Future[R]:
        """A future of the running loop that completes with this one."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise RuntimeError("as_asyncio() requires a running asyncio event loop.") from None
        return to_asyncio(self._cf, loop)

    def __await__(self) -> Generator[Any, None, R]:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise ValueError(
                "__await__ with no active event loop: use future.get() in synchronous code"
            ) from None
        return to_asyncio(self._cf, loop).__await__()

    def __repr__(self) -> str:
        state = "done" if self._cf.done() else "pending"
        return f"<monarch Future {state}>"


def _called_from_top_level() -> bool:
    """Whether the code that asked for the result (the first frame outside this
    module) is a module's or a cell's top level, not a function: in a running
    loop, that is Jupyter or IPython running a cell inside the kernel's loop
    (a plain script's top level never runs inside one)."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename == __file__:
        frame = frame.f_back  # type: ignore[assignment]
    return frame is not None and frame.f_code.co_name == "<module>"


def _loop_running_here() -> bool:
    # what asyncio.get_running_loop() asks, without raising (and catching) an
    # exception on every get() from plain code
    return asyncio._get_running_loop() is not None
