"""The ``Transport`` interface every backend implements, and what flows through it.

A transport turns an address into a ``Listener`` (yields what arrives, from
any number of peers) or a ``Sender`` (moves frames to one listener, in
order). Every connection is authenticated before a single frame passes.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Self

from ._address import Address
from ._errors import ListenerClosed
from ._settings import Settings

__all__ = [
    "Buffer",
    "Event",
    "Listener",
    "Peer",
    "PeerLeft",
    "Received",
    "Sender",
    "Transport",
]

Buffer = bytes | bytearray | memoryview


@dataclass(frozen=True, slots=True)
class Peer:
    """One authenticated connection to a listener: a number unique within the
    listener, and the name the peer gave when it connected.

    Args:
        id: the connection's number, unique within the listener.
        name: the name the peer gave when it connected (``Settings.name``).

    Attributes:
        id: the connection's number, unique within the listener.
        name: the name the peer gave when it connected.
    """

    id: int
    name: str


@dataclass(frozen=True, slots=True)
class Received:
    """A message from ``peer``: its frames, in the order they were sent.

    Args:
        peer: the connection it came over.
        frames: the message's frames; ``decode`` reads a message made by
            ``encode``.

    Attributes:
        peer: the connection it came over.
        frames: the message's frames, in the order they were sent.
    """

    peer: Peer
    frames: list[memoryview]


@dataclass(frozen=True, slots=True)
class PeerLeft:
    """``peer`` is gone: it closed, crashed, or broke the protocol. Nothing
    more will arrive from it, and everything it sent before came first.

    Args:
        peer: the connection that is gone.
        reason: why it went, in words.

    Attributes:
        peer: the connection that is gone.
        reason: why it went, in words.
    """

    peer: Peer
    reason: str


Event = Received | PeerLeft
"""What a listener yields: a ``Received`` message or a peer that left (``PeerLeft``)."""


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
    """Messages and departures of every peer connected to one address.

    ``async for event in listener`` yields events until the listener is closed.
    """

    address: Address
    """The address it listens on, with the port actually bound when port 0 was asked."""

    @abstractmethod
    async def receive(self) -> Event:
        """The next event; ``ListenerClosed`` once closed."""

    @abstractmethod
    async def aclose(self) -> None:
        """Stop listening and drop every connection."""

    def deliver_to(self, handler: Callable[[Event], None]) -> None:
        """From now on, call ``handler`` on the listener's loop with each event
        instead of waiting in ``receive()``: for a consumer that never blocks
        (a router), one task switch less per message. Call it right after
        ``listen``, from the loop's thread; the loop need not be running yet
        (a process may set up its listener before it starts serving).

        Backends call the handler straight from their read callbacks; this
        fallback, for backends that do not, runs a task over ``receive()``.

        Args:
            handler: called with each event, on the loop; it must not block.
        """

        async def pump() -> None:
            while True:
                try:
                    event = await self.receive()
                except ListenerClosed:
                    return
                handler(event)

        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # set up before the loop runs: the loop set for this thread
            loop = asyncio.get_event_loop()
        self._pump = loop.create_task(pump())

    def __aiter__(self) -> AsyncIterator[Event]:
        return self._events()

    async def _events(self) -> AsyncIterator[Event]:
        while True:
            try:
                yield await self.receive()
            except ListenerClosed:
                return


class Sender(_Closing):
    """An authenticated, ordered connection to one listener.

    A backend's sender calls ``super().__init__(address)``, marks the
    connection gone with ``_lose(reason)`` when it breaks, and ends it in
    ``_hang_up``; ``closed``, ``wait_closed`` and ``aclose`` are this class's.

    Args:
        address: the address of the listener it is connected to.
    """

    address: Address
    """The address of the listener it is connected to."""

    @abstractmethod
    async def send(self, frames: Sequence[Buffer]) -> None:
        """Queue ``frames`` as one message. Waits while the connection is
        backed up.

        Args:
            frames: the message's frames (from ``encode``); leave their
                buffers alone until they are sent.

        Raises:
            PeerDisconnected: the connection is gone.
            MessageTooLarge: the message is above ``Settings.max_message_size``, or
                has more than 65536 frames.
        """

    def send_nowait(self, frames: Sequence[Buffer]) -> bool:
        """Queue ``frames`` if that needs no waiting; whether it did. A router
        calls this first and falls back to ``send`` (a task) only when it
        returns False. Raises what ``send`` raises.

        The default, for backends that cannot, always returns False.

        Args:
            frames: the message's frames.
        """
        return False

    def send_threadsafe(self, frames: Sequence[Buffer]) -> bool:
        """Write ``frames`` as one message from a thread other than the
        loop's, if that needs no waiting and nothing this sender holds is
        still to go out first; whether it did. Never raises: a broken
        connection shows on the loop's next ``send``. The caller makes sure
        no other method of this sender runs meanwhile (a router holds a lock
        around its sends). The default, for backends that cannot write from
        another thread, is False.

        Args:
            frames: the message's frames.
        """
        return False

    def send_many_nowait(self, messages: Sequence[Sequence[Buffer]]) -> int:
        """Queue as many of ``messages`` as go without waiting, in order, and
        say how many did; backends that can write them all in one system
        call do (``socket``).

        Args:
            messages: the messages, each a sequence of frames.

        Returns:
            How many of the first ``messages`` were queued; send the rest with
            ``send``.
        """
        sent = 0
        for frames in messages:
            if not self.send_nowait(frames):
                break
            sent += 1
        return sent

    def __init__(self, address: Address) -> None:
        self.address = address
        self._reason: str | None = None  # why the connection is gone; None while it is up
        self._gone = asyncio.Event()

    def _lose(self, reason: str) -> None:
        """Mark the connection gone for ``reason``, unless it is already. On
        the sender's loop."""
        if self._reason is None:
            self._reason = reason
            self._gone.set()

    @property
    def closed(self) -> bool:
        """Whether the connection is gone (closed here or lost)."""
        return self._reason is not None

    async def wait_closed(self) -> str:
        """Wait until the connection is gone; why it went."""
        await self._gone.wait()
        return self._reason or "closed"

    async def aclose(self) -> None:
        """Close after the messages already queued are handed to the system."""
        if self._reason is None:
            self._lose("closed by this side")
            await self._hang_up()

    async def abort(self, reason: str) -> None:
        """End the connection at once, with nothing handed over and nothing
        said: for a peer known to be gone (dead, or declared dead), which a
        goodbye would only wait on.

        Args:
            reason: why; ``wait_closed()`` returns it, and a later ``send``
                raises ``PeerDisconnected`` with it.
        """
        if self._reason is None:
            self._lose(reason)
            await self._cut()

    @abstractmethod
    async def _hang_up(self) -> None:
        """End the connection, once, when ``aclose`` has just marked it closed
        by this side: hand what is queued to the system first."""

    async def _cut(self) -> None:
        """End the connection, once, when ``abort`` has just marked it lost.
        Where a hang-up waits for nobody, it is the same."""
        await self._hang_up()


class Transport(ABC):
    """A way to move frames: ``listen`` on an address, ``connect`` to one."""

    name: str
    """The backend's name in the registry, as ``$MONARCH_TRANSPORT`` gives it."""

    @abstractmethod
    async def listen(self, address: Address, settings: Settings) -> Listener:
        """Listen on ``address``.

        Args:
            address: where to listen.
            settings: the secret, limits and TLS files.

        Raises:
            ConnectError: the address cannot be bound.
        """

    @abstractmethod
    async def connect(self, address: Address, settings: Settings) -> Sender:
        """An authenticated connection to the listener at ``address``.

        Args:
            address: the listener's address.
            settings: the secret, limits and TLS files.

        Raises:
            ConnectError: nothing listens at ``address``.
            AuthenticationError: the handshake failed.
        """
