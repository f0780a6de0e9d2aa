"""The ``Transport`` interface every backend implements, and what flows through it.

A transport turns an address into a ``Listener`` (yields what arrives, from
any number of peers) or a ``Sender`` (moves frames to one listener, in
order). Every connection is authenticated before a single frame passes.
"""

from __future__ import annotations

import asyncio
import collections
import os
import threading
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Final, Self

from ._address import Address
from ._auth import job_secret
from ._errors import TransportError

__all__ = [
    "Buffer",
    "Event",
    "Listener",
    "ListenerClosed",
    "Peer",
    "PeerLeft",
    "Received",
    "Sender",
    "Settings",
    "TlsFiles",
    "Transport",
]

Buffer = bytes | bytearray | memoryview
MAX_SIZE_ENV: Final = "MONARCH_MAX_MESSAGE_SIZE"
DEFAULT_MAX_SIZE: Final = 4 << 30  # 4 GiB


class ListenerClosed(TransportError):
    """``receive()`` on a listener that was closed."""


@dataclass(frozen=True, slots=True)
class Peer:
    """One authenticated connection to a listener: a number unique within the
    listener, and the name the peer gave when it connected."""

    id: int
    name: str


@dataclass(frozen=True, slots=True)
class Received:
    """A message from ``peer``: its frames, in the order they were sent."""

    peer: Peer
    frames: list[memoryview]


@dataclass(frozen=True, slots=True)
class PeerLeft:
    """``peer`` is gone: it closed, crashed, or broke the protocol. Nothing
    more will arrive from it, and everything it sent before came first."""

    peer: Peer
    reason: str


Event = Received | PeerLeft


def _default_max_size() -> int:
    text = os.environ.get(MAX_SIZE_ENV)
    if text is None:
        return DEFAULT_MAX_SIZE
    if not text.isdigit() or int(text) < 1024:
        raise TransportError(f"{MAX_SIZE_ENV} must be a byte count of at least 1024, got {text!r}")
    return int(text)


TLS_ENV: Final = ("HYPERACTOR_TLS_CA", "HYPERACTOR_TLS_CERT", "HYPERACTOR_TLS_KEY")


@dataclass(frozen=True)
class TlsFiles:
    """PEM files for ``tls+tcp://`` addresses: the CA that signed the peers'
    certificates, and this side's certificate and key. ``TlsFiles.from_env()``
    reads Monarch's ``HYPERACTOR_TLS_CA``/``_CERT``/``_KEY``."""

    ca: str
    cert: str
    key: str
    server_name: str | None = None  # what a connecting side expects; default: the host

    @staticmethod
    def from_env() -> TlsFiles | None:
        paths = [os.environ.get(name) for name in TLS_ENV]
        if not any(paths):
            return None
        missing = [name for name, path in zip(TLS_ENV, paths, strict=True) if not path]
        if missing:
            raise TransportError(
                f"TLS needs all of {', '.join(TLS_ENV)}; missing {', '.join(missing)}"
            )
        return TlsFiles(*paths)  # type: ignore[arg-type]

    def read(self) -> tuple[str, str, str]:
        """The CA, certificate and key as PEM text."""
        try:
            return tuple(open(path).read() for path in (self.ca, self.cert, self.key))  # type: ignore[return-value]
        except OSError as error:
            raise TransportError(f"cannot read a TLS file: {error}") from error


@dataclass(frozen=True)
class Settings:
    """What both sides of a connection must agree on, and local limits.

    ``secret``: the job's secret (``$MONARCH_JOB_SECRET``); ``max_message_size``:
    the largest message accepted or sent (``$MONARCH_MAX_MESSAGE_SIZE``, 4 GiB
    by default); ``handshake_timeout``: seconds a peer gets to authenticate;
    ``queue_depth``: messages a listener buffers before its senders wait;
    ``name``: how a sender introduces itself to the listener; ``tls``: the
    certificates for ``tls+tcp://`` addresses (``$HYPERACTOR_TLS_*`` by default).
    """

    secret: bytes = field(default_factory=job_secret)
    max_message_size: int = field(default_factory=_default_max_size)
    handshake_timeout: float = 5.0
    queue_depth: int = 1024
    name: str = ""
    tls: TlsFiles | None = field(default_factory=TlsFiles.from_env)

    def tls_files(self, address: Address) -> TlsFiles:
        """The TLS files for ``address``; a clear error when there are none."""
        if self.tls is None:
            raise TransportError(
                f"{address} is a TLS address but no certificates are configured: set "
                f"{', '.join(TLS_ENV)} (PEM file paths) or pass Settings(tls=TlsFiles(...))"
            )
        return self.tls


class _Closing(ABC):
    """``async with`` closes it."""

    @abstractmethod
    async def aclose(self) -> None: ...

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


class Listener(_Closing):
    """Messages and departures of every peer connected to one address."""

    address: Address

    @abstractmethod
    async def receive(self) -> Event:
        """The next event; ``ListenerClosed`` once closed."""

    @abstractmethod
    async def aclose(self) -> None:
        """Stop listening and drop every connection."""

    def deliver_to(self, handler: Callable[[Event], None]) -> None:
        """From now on, call ``handler`` on the loop with each event instead of
        waiting in ``receive()``: for a consumer that never blocks (a router),
        one task switch less per message. Call it right after ``listen``. A
        backend may call the handler straight from its read callback; this
        version runs a task over ``receive()``."""

        async def pump() -> None:
            while True:
                try:
                    event = await self.receive()
                except ListenerClosed:
                    return
                handler(event)

        self._pump = asyncio.get_running_loop().create_task(pump())

    def __aiter__(self) -> AsyncIterator[Event]:
        return self._events()

    async def _events(self) -> AsyncIterator[Event]:
        while True:
            try:
                yield await self.receive()
            except ListenerClosed:
                return


class Sender(_Closing):
    """An authenticated, ordered connection to one listener."""

    address: Address

    @abstractmethod
    async def send(self, frames: Sequence[Buffer]) -> None:
        """Queue ``frames`` as one message. Waits while the connection is
        backed up; ``PeerDisconnected`` once the connection is gone."""

    def send_nowait(self, frames: Sequence[Buffer]) -> bool:
        """Queue ``frames`` if that needs no waiting; whether it did. A router
        calls this first and falls back to ``send`` (a task) only when it
        returns False. Raises what ``send`` raises."""
        return False

    def send_many_nowait(self, messages: Sequence[Sequence[Buffer]]) -> int:
        """Queue as many of ``messages`` as go without waiting, in order, and
        say how many did; backends that can write them all in one system
        call do (``socket``)."""
        sent = 0
        for frames in messages:
            if not self.send_nowait(frames):
                break
            sent += 1
        return sent

    @property
    @abstractmethod
    def closed(self) -> bool:
        """Whether the connection is gone (closed here or lost)."""

    @abstractmethod
    async def wait_closed(self) -> str:
        """Wait until the connection is gone; why it went."""

    @abstractmethod
    async def aclose(self) -> None:
        """Close after the messages already queued are handed to the system."""


class Transport(ABC):
    """A way to move frames: ``listen`` on an address, ``connect`` to one."""

    name: str

    @abstractmethod
    async def listen(self, address: Address, settings: Settings) -> Listener: ...

    @abstractmethod
    async def connect(self, address: Address, settings: Settings) -> Sender: ...


class EventQueue:
    """The events of a listener: producers anywhere, one consumer on the loop.
    ``put`` never waits but says when more than ``depth`` events wait; the
    producer then stops reading and asks ``when_room`` to hear when the queue
    has drained to half: that is how a slow consumer slows its senders."""

    def __init__(self, depth: int) -> None:
        self._loop = asyncio.get_running_loop()
        self._depth = depth
        self._items: collections.deque[Event | BaseException] = collections.deque()
        self._lock = threading.Lock()
        self._waiter: asyncio.Future[None] | None = None
        self._on_room: list[Callable[[], None]] = []

    def put(self, item: Event | BaseException) -> bool:
        """Append, from any thread, never waiting; whether the queue is now full."""
        with self._lock:
            self._items.append(item)
            waiter, self._waiter = self._waiter, None
            full = len(self._items) >= self._depth
        if waiter is not None:
            if _on_loop(self._loop):
                _wake(waiter)
            else:
                self._loop.call_soon_threadsafe(_wake, waiter)
        return full

    def empty(self) -> bool:
        with self._lock:
            return not self._items

    def when_room(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` on the loop once the queue has drained to half."""
        self._on_room.append(callback)

    async def room(self) -> None:
        """Wait until the queue has drained to half."""
        drained = self._loop.create_future()
        self.when_room(lambda: _wake(drained))
        await drained

    async def get(self) -> Event:
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


def _on_loop(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
