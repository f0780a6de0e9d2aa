"""The default backend: nng sockets through pynng.

pynng's blocking calls are several times faster than its asyncio ones, so
each listener runs one thread in a blocking receive loop that hands events to
the event loop (waking it only when it waits), and a sender sends without
blocking when nng has room and falls back to a worker thread when it does
not. Every connection is a pipe of a polyamorous PAIR1 socket, so the
listener can answer a pipe during the handshake.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

import anyio
import pynng

from ._address import Address
from ._auth import ClientHandshake, ServerHandshake
from ._errors import (
    AuthenticationError,
    ConnectError,
    DecodeError,
    MessageTooLarge,
    PeerDisconnected,
)
from ._interface import (
    Buffer,
    EventQueue,
    Listener,
    ListenerClosed,
    Peer,
    PeerLeft,
    Received,
    Sender,
    Settings,
    Transport,
)
from ._wire import Kind, join, split

__all__ = ["NngTransport"]

log = logging.getLogger("monarch.transport.nng")
POLL_MS = 100  # how often the receive thread looks for departed pipes while idle
OVERHEAD = 1 << 20  # room for the frame table on top of the payload limit


def _url(address: Address) -> str:
    return str(address)


@dataclass
class _Pipe:
    pipe: pynng.Pipe
    handshake: ServerHandshake
    peer: Peer | None = None


@dataclass
class _State:
    pipes: dict[int, _Pipe] = field(default_factory=dict)
    gone: list[int] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


class NngListener(Listener):
    def __init__(self, address: Address, settings: Settings) -> None:
        self._settings = settings
        self._queue = EventQueue(settings.queue_depth)
        self._loop = asyncio.get_running_loop()
        self._ids = itertools.count(1)
        self._state = _State()
        self._closed = False
        self._sock = pynng.Pair1(polyamorous=True, recv_max_size=settings.max_message_size + OVERHEAD)
        self._sock.recv_timeout = POLL_MS
        self._sock.add_post_pipe_connect_cb(self._on_connect)
        self._sock.add_post_pipe_remove_cb(self._on_remove)
        try:
            bound = self._sock.listen(_url(address))
        except pynng.NNGException as error:
            self._sock.close()
            raise ConnectError(f"cannot listen on {address}: {error}") from error
        if address.scheme == "tcp":
            port = int(str(bound.local_address).rpartition(":")[2])
            address = address.with_port(port)
        self.address = address
        self._thread = threading.Thread(
            target=self._receive_loop, name=f"monarch-nng-recv {address}", daemon=True
        )
        self._thread.start()

    # -- nng's callbacks (its own threads) ------------------------------------

    def _on_connect(self, pipe: pynng.Pipe) -> None:
        with self._state.lock:  # the receive thread may have met this pipe first
            self._state.pipes.setdefault(pipe.id, _Pipe(pipe, ServerHandshake(self._settings.secret)))
        self._loop.call_soon_threadsafe(
            self._loop.call_later, self._settings.handshake_timeout, self._deadline, pipe.id
        )

    def _on_remove(self, pipe: pynng.Pipe) -> None:
        with self._state.lock:
            self._state.gone.append(pipe.id)

    def _deadline(self, pipe_id: int) -> None:
        with self._state.lock:
            state = self._state.pipes.get(pipe_id)
        if state is not None and state.peer is None:
            log.warning("closing a connection that did not authenticate in time")
            _close_pipe(state.pipe)

    # -- the receive thread -------------------------------------------------------

    def _receive_loop(self) -> None:
        sock = self._sock
        while True:
            try:
                msg = sock.recv_msg()
            except pynng.Timeout:
                self._report_departures()
                continue
            except pynng.Closed:
                break
            self._handle(msg)
            if self._state.gone:
                self._report_departures()
        self._queue.put(ListenerClosed(f"listener on {self.address} is closed"))

    def _report_departures(self) -> None:
        """Report pipes that went away, once their last messages are handled:
        drain what the socket holds first, so a departure never overtakes."""
        with self._state.lock:
            gone, self._state.gone = self._state.gone, []
        while True:
            try:
                self._handle(self._sock.recv_msg(block=False))
            except (pynng.TryAgain, pynng.Closed):
                break
        for pipe_id in gone:
            with self._state.lock:
                state = self._state.pipes.pop(pipe_id, None)
            if state is not None and state.peer is not None:
                self._queue.put(PeerLeft(state.peer, "connection closed"))

    def _handle(self, msg: pynng.Message) -> None:
        pipe = msg.pipe
        with self._state.lock:
            state = self._state.pipes.get(pipe.id)
        if state is None:  # its connect callback has not run yet
            fresh = _Pipe(pipe, ServerHandshake(self._settings.secret))
            with self._state.lock:
                state = self._state.pipes.setdefault(pipe.id, fresh)
        try:
            kind, frames = split(msg.bytes, self._settings.max_message_size)
        except (DecodeError, MessageTooLarge) as error:
            self._reject(state, f"malformed message: {error}")
            return
        if state.peer is None:
            self._authenticate(state, kind, frames)
        elif kind == Kind.DATA:
            self._queue.put_from_thread(Received(state.peer, frames))
        else:
            self._reject(state, f"unexpected message kind {kind} after the handshake")

    def _authenticate(self, state: _Pipe, kind: int, frames: list[memoryview]) -> None:
        try:
            if len(frames) != 1:
                raise AuthenticationError("handshake messages carry exactly one frame")
            reply = state.handshake.step(kind, frames[0])
        except AuthenticationError as error:
            try:
                state.pipe.send(join(Kind.DENIED, [str(error).encode()], 1 << 16))
            except pynng.NNGException:
                pass
            self._reject(state, f"authentication failed: {error}")
            return
        state.pipe.send(join(reply[0], [reply[1]], 1 << 16))
        if state.handshake.done:
            state.peer = Peer(next(self._ids), state.handshake.peer_name)

    def _reject(self, state: _Pipe, why: str) -> None:
        who = state.peer or "an unauthenticated peer"
        log.warning("closing the connection of %s on %s: %s", who, self.address, why)
        _close_pipe(state.pipe)

    # -- the consumer -------------------------------------------------------------

    async def receive(self) -> Received | PeerLeft:
        return await self._queue.get()

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            await anyio.to_thread.run_sync(self._sock.close)
            await anyio.to_thread.run_sync(self._thread.join)


def _close_pipe(pipe: pynng.Pipe) -> None:
    try:
        pipe.close()
    except pynng.NNGException:
        pass


class NngSender(Sender):
    def __init__(self, address: Address, settings: Settings, sock: pynng.Socket) -> None:
        self.address = address
        self._settings = settings
        self._sock = sock
        self._loop = asyncio.get_running_loop()
        self._lock = asyncio.Lock()
        self._busy = 0  # sends waiting in a worker thread; later sends queue behind them
        self._reason: str | None = None
        self._gone = asyncio.Event()
        sock.add_post_pipe_remove_cb(self._on_remove)
        if not sock.pipes:  # lost between the handshake and now
            self._lost("the listener closed the connection")

    def _on_remove(self, pipe: pynng.Pipe) -> None:
        self._loop.call_soon_threadsafe(self._lost, "the listener closed the connection")

    def _lost(self, reason: str) -> None:
        if self._reason is None:
            self._reason = reason
            self._gone.set()
            # nng would redial on its own; a new connection must authenticate anew
            self._loop.run_in_executor(None, self._sock.close)

    async def send(self, frames: Sequence[Buffer]) -> None:
        if self._reason is not None:
            raise PeerDisconnected(f"connection to {self.address} is gone: {self._reason}")
        data = join(Kind.DATA, frames, self._settings.max_message_size)
        if not self._busy:
            try:
                self._sock.send(data, block=False)
                return
            except pynng.TryAgain:
                pass
            except pynng.Closed:
                raise PeerDisconnected(f"connection to {self.address} is closed") from None
        self._busy += 1
        try:
            async with self._lock:
                await anyio.to_thread.run_sync(self._blocking_send, data)
        finally:
            self._busy -= 1

    def _blocking_send(self, data: bytes) -> None:
        try:
            self._sock.send(data)
        except pynng.Closed:
            raise PeerDisconnected(
                f"connection to {self.address} closed before a message went out"
            ) from None

    @property
    def closed(self) -> bool:
        return self._reason is not None

    async def wait_closed(self) -> str:
        await self._gone.wait()
        return self._reason or "closed"

    async def aclose(self) -> None:
        async with self._lock:  # messages already handed to us go out first
            if self._reason is None:
                self._reason = "closed by this side"
                self._gone.set()
                await anyio.to_thread.run_sync(self._sock.close)


class NngTransport(Transport):
    name = "nng"

    async def listen(self, address: Address, settings: Settings) -> Listener:
        return NngListener(address, settings)

    async def connect(self, address: Address, settings: Settings) -> Sender:
        sock = await anyio.to_thread.run_sync(_dial_and_authenticate, address, settings)
        return NngSender(address, settings, sock)


def _dial_and_authenticate(address: Address, settings: Settings) -> pynng.Pair1:
    sock = pynng.Pair1(recv_max_size=1 << 16)
    sock.recv_timeout = int(settings.handshake_timeout * 1000)
    sock.send_timeout = int(settings.handshake_timeout * 1000)
    try:
        try:
            sock.dial(_url(address), block=True)
        except pynng.NNGException as error:
            raise ConnectError(f"cannot connect to {address}: {error}") from error
        client = ClientHandshake(settings.secret, settings.name)
        _send(sock, *client.hello())
        _send(sock, *client.answer(*_receive(sock)))
        client.check(*_receive(sock))
    except (pynng.Timeout, pynng.Closed) as error:
        sock.close()
        raise AuthenticationError(f"{address} did not complete the handshake: {error}") from error
    except BaseException:
        sock.close()
        raise
    sock.recv_timeout = -1
    sock.send_timeout = -1
    return sock


def _send(sock: pynng.Socket, kind: int, payload: bytes) -> None:
    sock.send(join(kind, [payload], 1 << 16))


def _receive(sock: pynng.Socket) -> tuple[int, memoryview]:
    kind, frames = split(sock.recv(), 1 << 16)
    if len(frames) != 1:
        raise AuthenticationError("handshake messages carry exactly one frame")
    return kind, frames[0]
