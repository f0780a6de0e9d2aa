"""The in-process backend: listeners and senders in one process, for actors
that live in the controller's own process and for tests.

It runs the same handshake as the other backends and copies every frame on
send, so a message is a snapshot exactly as it is over a socket.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import Sequence

from ._address import Address
from ._auth import ClientHandshake, ServerHandshake
from ._errors import ConnectError, ListenerClosed, PeerDisconnected
from ._event_queue import EventQueue, QueuedListener
from ._interface import Buffer, Event, Listener, Peer, PeerLeft, Received, Sender, Transport
from ._registry import register_backend
from ._settings import Settings
from ._wire import prefix

__all__ = ["InprocTransport"]

_listeners: dict[str, InprocListener] = {}
_registry_lock = threading.Lock()


class InprocListener(QueuedListener):
    def __init__(self, address: Address, settings: Settings) -> None:
        self.address = address
        self._settings = settings
        self._loop = asyncio.get_running_loop()
        self._queue = EventQueue(settings.queue_depth)
        self._ids = itertools.count(1)
        self._senders: set[InprocSender] = set()
        self.closed = False

    def accept(self, client: ClientHandshake) -> Peer:
        server = ServerHandshake(self._settings.secret)
        challenge = server.step(*client.hello())
        client.check(*server.step(*client.answer(*challenge)))
        return Peer(next(self._ids), server.peer_name)

    def deliver(self, event: Event) -> None:
        self._queue.put(event)

    async def deliver_waiting(self, event: Event) -> None:
        """Deliver; a sender on the listener's own loop waits while it is backed up."""
        if self._queue.put(event) and asyncio.get_running_loop() is self._loop:
            await self._queue.room()

    async def aclose(self) -> None:
        if self.closed:
            return
        self.closed = True
        with _registry_lock:
            if _listeners.get(self.address.path) is self:
                del _listeners[self.address.path]
        for sender in list(self._senders):
            sender.lost("the listener closed")
        self._queue.put(ListenerClosed(f"listener on {self.address} is closed"))


class InprocSender(Sender):
    def __init__(self, listener: InprocListener, peer: Peer, settings: Settings) -> None:
        super().__init__(listener.address)
        self._listener = listener
        self._peer = peer
        self._settings = settings
        self._loop = asyncio.get_running_loop()
        listener._senders.add(self)

    def lost(self, reason: str) -> None:
        if asyncio.get_running_loop() is not self._loop:
            self._loop.call_soon_threadsafe(self.lost, reason)
            return
        self._lose(reason)

    async def send(self, frames: Sequence[Buffer]) -> None:
        if self._reason is not None:
            raise PeerDisconnected(f"connection to {self.address} is gone: {self._reason}")
        prefix(0, frames, self._settings.max_message_size)  # the same size check as on a wire
        copies = [memoryview(bytearray(f)) for f in frames]
        await self._listener.deliver_waiting(Received(self._peer, copies))

    async def _hang_up(self) -> None:
        self._listener._senders.discard(self)
        if not self._listener.closed:
            self._listener.deliver(PeerLeft(self._peer, "connection closed"))


class InprocTransport(Transport):
    name = "inproc"

    async def listen(self, address: Address, settings: Settings) -> Listener:
        listener = InprocListener(address, settings)
        with _registry_lock:
            if address.path in _listeners:
                raise ConnectError(f"cannot listen on {address}: something already listens there")
            _listeners[address.path] = listener
        return listener

    async def connect(self, address: Address, settings: Settings) -> Sender:
        with _registry_lock:
            listener = _listeners.get(address.path)
        if listener is None:
            raise ConnectError(
                f"cannot connect to {address}: nothing listens there in this process"
            )
        peer = listener.accept(ClientHandshake(settings.secret, settings.name))
        return InprocSender(listener, peer, settings)


register_backend(InprocTransport, owns_scheme="inproc")
