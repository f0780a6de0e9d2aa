"""The result of one call's replies: set once on the control loop, waited on
by the calling thread.

``concurrent.futures.Future`` would do, but every call made one and paid
for it: a ``threading.Condition`` to build, then a wait and a notify that
run in Python on both threads. A ``Reply`` waits on one lock instead, held
from birth and released once when the result is set; every waiter takes it
and gives it back, so any number may wait.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

__all__ = ["Reply", "to_asyncio"]

T = TypeVar("T")
log = logging.getLogger(__name__)

_PENDING, _RESULT, _ERROR, _CANCELLED = 0, 1, 2, 3


class Reply(Generic[T]):
    """A one-shot result with the ``concurrent.futures.Future`` methods the
    runtime uses: ``result``, ``exception``, ``done``, ``cancelled``,
    ``cancel``, ``add_done_callback``, ``set_result``, ``set_exception``.
    Setting it twice raises ``concurrent.futures.InvalidStateError``, as
    there."""

    __slots__ = ("_callbacks", "_latch", "_mutex", "_state", "_value")

    def __init__(self) -> None:
        self._mutex = threading.Lock()  # settling and adding callbacks, one at a time
        self._latch = threading.Lock()  # held until settled: waiters block on it
        self._latch.acquire()
        self._state = _PENDING
        self._value: Any = None
        self._callbacks: list[Callable[[Reply[T]], object]] | None = None

    def set_result(self, value: T) -> None:
        """Settle with ``value``, waking every waiter."""
        self._settle(_RESULT, value)

    def set_exception(self, error: BaseException) -> None:
        """Settle with ``error``: ``result()`` raises it."""
        self._settle(_ERROR, error)

    def cancel(self) -> bool:
        """Settle as cancelled, if nothing settled it yet; whether it is cancelled."""
        try:
            self._settle(_CANCELLED, None)
        except concurrent.futures.InvalidStateError:
            return self._state == _CANCELLED
        return True

    def _settle(self, state: int, value: Any) -> None:
        with self._mutex:
            if self._state != _PENDING:
                raise concurrent.futures.InvalidStateError(f"the result is already set: {self!r}")
            self._value = value  # before the state: a reader that sees the state sees it
            self._state = state
            callbacks, self._callbacks = self._callbacks, None
        self._latch.release()
        for callback in callbacks or ():
            self._run(callback)

    def _run(self, callback: Callable[[Reply[T]], object]) -> None:
        try:
            callback(self)
        except Exception:
            log.exception("a callback of %r raised", self)

    def add_done_callback(self, callback: Callable[[Reply[T]], object]) -> None:
        """Call ``callback(self)`` once settled: on the settling thread, or
        at once on this one if it is settled already."""
        with self._mutex:
            if self._state == _PENDING:
                if self._callbacks is None:
                    self._callbacks = []
                self._callbacks.append(callback)
                return
        self._run(callback)

    def done(self) -> bool:
        """Whether it is settled."""
        return self._state != _PENDING

    def cancelled(self) -> bool:
        """Whether it was cancelled."""
        return self._state == _CANCELLED

    def _wait(self, timeout: float | None) -> None:
        if self._state == _PENDING:
            if not self._latch.acquire(timeout=-1 if timeout is None else timeout):
                raise concurrent.futures.TimeoutError()
            self._latch.release()  # for the next waiter

    def result(self, timeout: float | None = None) -> T:
        """The result, waiting up to ``timeout`` seconds (``None``: no limit).

        Raises:
            concurrent.futures.TimeoutError: not settled in time.
            concurrent.futures.CancelledError: it was cancelled.
            BaseException: the error it was settled with.
        """
        self._wait(timeout)
        if self._state == _RESULT:
            value: T = self._value
            return value
        if self._state == _CANCELLED:
            raise concurrent.futures.CancelledError()
        raise self._value

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """The error it was settled with (``None`` for a result), waiting as ``result``."""
        self._wait(timeout)
        if self._state == _CANCELLED:
            raise concurrent.futures.CancelledError()
        return self._value if self._state == _ERROR else None

    def __repr__(self) -> str:
        state = ("pending", "finished", "failed", "cancelled")[self._state]
        return f"<Reply {state}>"


def to_asyncio(
    source: Reply[Any] | concurrent.futures.Future[Any], loop: asyncio.AbstractEventLoop
) -> asyncio.Future[Any]:
    """A future of ``loop`` that completes as ``source`` does (``asyncio.wrap_future``
    for either kind)."""
    if isinstance(source, concurrent.futures.Future):
        return asyncio.wrap_future(source, loop=loop)
    target: asyncio.Future[Any] = loop.create_future()

    def copy(settled: Reply[Any]) -> None:
        if target.done():  # cancelled by its awaiter meanwhile
            return
        if settled.cancelled():
            target.cancel()
        elif (error := settled.exception()) is not None:
            target.set_exception(error)
        else:
            target.set_result(settled.result())

    def settled_elsewhere(settled: Reply[Any]) -> None:
        if not loop.is_closed():
            loop.call_soon_threadsafe(copy, settled)

    source.add_done_callback(settled_elsewhere)
    return target
