"""The events of a listener, between the backend that produces them and the
one consumer that takes them: by ``receive()``, or handed to a callback
(``Listener.deliver_to``). Every backend uses it, so all of them order,
hand over and push back the same way."""

from __future__ import annotations

import asyncio
import collections
import threading
from collections.abc import Callable
from threading import get_ident

from ._interface import Event, Listener
from ._loop import wake

__all__ = ["EventQueue", "QueuedListener"]


class EventQueue:
    """Producers anywhere, one consumer on the loop the queue was made on.

    ``put`` never waits but says when more than ``depth`` events wait; the
    producer then stops reading and asks ``when_room`` to hear when the queue
    has drained to half: that is how a slow consumer slows its senders.

    After ``deliver_to(handler)`` events go to ``handler`` on the loop
    instead: straight from ``put`` when it runs on the loop with nothing
    waiting ahead, otherwise in order from a callback scheduled on the loop.
    """

    def __init__(self, depth: int) -> None:
        self._loop = asyncio.get_running_loop()
        self._thread = get_ident()  # the loop's: it runs where the queue is made
        self._depth = depth
        self._items: collections.deque[Event | BaseException] = collections.deque()
        self._lock = threading.Lock()
        self._waiter: asyncio.Future[None] | None = None
        self._on_room: list[Callable[[], None]] = []
        self._handler: Callable[[Event], None] | None = None
        self._flushing = False  # a _flush is scheduled on the loop

    def deliver_to(self, handler: Callable[[Event], None]) -> None:
        """Hand every event, those waiting first, to ``handler`` on the loop.
        May be called before the loop runs: waiting events then go once it does."""
        with self._lock:
            self._handler = handler
            schedule = bool(self._items) and not self._flushing
            self._flushing |= schedule
        if schedule:
            self._loop.call_soon_threadsafe(self._flush)

    def put(self, item: Event | BaseException) -> bool:
        """Append, from any thread, never waiting; whether the queue is now full.
        An exception is the answer for every later ``get()``."""
        handler = self._handler
        here = get_ident() == self._thread
        if handler is not None and here and not self._items and not isinstance(item, BaseException):
            # the common case, without the lock: only the loop takes items out,
            # so nothing can be waiting ahead of this one
            handler(item)
            return False
        with self._lock:
            self._items.append(item)
            if self._handler is not None:
                if not self._flushing:  # behind what waits, or from another thread
                    self._flushing = True
                    self._loop.call_soon_threadsafe(self._flush)
                return False  # a handler is never behind
            waiter, self._waiter = self._waiter, None
            full = len(self._items) >= self._depth
        if waiter is not None:
            if here:
                wake(waiter)
            else:
                self._loop.call_soon_threadsafe(wake, waiter)
        return full

    def _flush(self) -> None:
        """Hand what waits to the handler, in order (on the loop)."""
        while True:
            with self._lock:
                item = self._items[0] if self._items else None
                if item is None or isinstance(item, BaseException):
                    self._flushing = False  # an exception stays: the answer for get()
                    return
                self._items.popleft()
                handler = self._handler
            assert handler is not None
            handler(item)

    def when_room(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` on the loop once the queue has drained to half."""
        self._on_room.append(callback)

    async def room(self) -> None:
        """Wait until the queue has drained to half."""
        drained = self._loop.create_future()
        self.when_room(lambda: wake(drained))
        await drained

    async def get(self) -> Event:
        """The next event, waiting for one; raises the exception put last."""
        while True:
            with self._lock:
                if self._items:
                    item = self._items.popleft()
                    left = len(self._items)
                    break
                self._waiter = self._loop.create_future()
                waiter = self._waiter
            await waiter
        if self._on_room and left <= self._depth // 2:
            callbacks, self._on_room = self._on_room, []
            for callback in callbacks:
                callback()
        if isinstance(item, BaseException):
            with self._lock:
                self._items.appendleft(item)  # the answer for every later get()
            raise item
        return item


class QueuedListener(Listener):
    """A listener whose backend puts its events in ``self._queue``: it
    receives them from there, or has them handed to a handler."""

    _queue: EventQueue

    async def receive(self) -> Event:
        return await self._queue.get()

    def deliver_to(self, handler: Callable[[Event], None]) -> None:
        self._queue.deliver_to(handler)
