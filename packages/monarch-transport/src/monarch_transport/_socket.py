"""The plain-socket backend: TCP or Unix stream sockets on the event loop.

Messages are length-prefixed (see ``_wire``). Reads go through one buffer
per connection, so many small messages cost few system calls, while a large
frame is received straight into its own writable buffer: no copies beyond
the kernel's, and the receiver may modify what it got.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import socket
from collections.abc import Sequence

from ._address import Address
from ._auth import ClientHandshake, ServerHandshake
from ._errors import AuthenticationError, ConnectError, DecodeError, MessageTooLarge, PeerDisconnected
from ._interface import (
    Buffer,
    Event,
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
from ._wire import HEAD, Kind, prefix, read_lengths

__all__ = ["SocketTransport"]

log = logging.getLogger("monarch.transport.socket")
READ_BUFFER = 1 << 18
SMALL = 1 << 16  # messages up to this size are joined into one write


class _Reader:
    """Whole messages from a stream socket."""

    def __init__(self, sock: socket.socket, max_size: int) -> None:
        self._sock = sock
        self._max = max_size
        self._loop = asyncio.get_running_loop()
        self._buf = bytearray(READ_BUFFER)
        self._start = 0
        self._end = 0

    async def _fill(self, need: int) -> None:
        """Have at least ``need`` unread bytes in the buffer (``need`` is small)."""
        if self._end - self._start >= need:
            return
        if self._start + need > len(self._buf):
            size = self._end - self._start
            self._buf[:size] = self._buf[self._start : self._end]
            self._start, self._end = 0, size
        view = memoryview(self._buf)
        while self._end - self._start < need:
            n = await self._loop.sock_recv_into(self._sock, view[self._end :])
            if n == 0:
                raise EOFError("the peer closed the connection")
            self._end += n

    async def read(self) -> tuple[int, list[memoryview]]:
        await self._fill(HEAD.size)
        kind, count = HEAD.unpack_from(self._buf, self._start)
        if count > 1 << 16:
            raise DecodeError(f"message announces {count} frames")
        table = HEAD.size + 8 * count
        await self._fill(table)
        lengths = read_lengths(
            kind, count, self._buf[self._start + HEAD.size : self._start + table], self._max
        )
        self._start += table
        frames = []
        for length in lengths:
            out = bytearray(length)
            have = min(self._end - self._start, length)
            out[:have] = self._buf[self._start : self._start + have]
            self._start += have
            view = memoryview(out)
            while have < length:
                n = await self._loop.sock_recv_into(self._sock, view[have:])
                if n == 0:
                    raise EOFError("the peer closed the connection mid-message")
                have += n
            frames.append(view)
        return kind, frames


async def _write(sock: socket.socket, kind: int, frames: Sequence[Buffer], max_size: int) -> None:
    loop = asyncio.get_running_loop()
    head = prefix(kind, frames, max_size)
    if len(head) + sum(memoryview(f).nbytes for f in frames) <= SMALL:
        await loop.sock_sendall(sock, b"".join([head, *frames]))
        return
    await loop.sock_sendall(sock, head)
    for frame in frames:
        await loop.sock_sendall(sock, frame)


def _stream_socket(address: Address) -> socket.socket:
    if address.scheme == "ipc":
        return socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    family = socket.AF_INET6 if ":" in address.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


class SocketListener(Listener):
    def __init__(self, address: Address, settings: Settings, sock: socket.socket) -> None:
        self._settings = settings
        self._sock = sock
        self._queue = EventQueue(settings.queue_depth)
        self._ids = itertools.count(1)
        self._tasks: set[asyncio.Task[None]] = set()
        self._conns: set[socket.socket] = set()
        self._closed = False
        if address.scheme == "tcp":
            address = address.with_port(sock.getsockname()[1])
        self.address = address
        self._accepting = asyncio.get_running_loop().create_task(self._accept_loop())

    async def _accept_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, _ = await loop.sock_accept(self._sock)
            except (OSError, asyncio.CancelledError):
                return
            conn.setblocking(False)
            if conn.family != socket.AF_UNIX:
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._conns.add(conn)
            task = loop.create_task(self._serve(conn))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _serve(self, conn: socket.socket) -> None:
        reader = _Reader(conn, self._settings.max_message_size)
        peer = None
        try:
            peer = await asyncio.wait_for(
                self._authenticate(conn, reader), self._settings.handshake_timeout
            )
            while True:
                kind, frames = await reader.read()
                if kind != Kind.DATA:
                    raise DecodeError(f"unexpected message kind {kind} after the handshake")
                await self._queue.put(Received(peer, frames))
        except (DecodeError, MessageTooLarge, AuthenticationError) as error:
            reason = f"protocol error: {error}"
            who = peer or "an unauthenticated peer"
            log.warning("closing the connection of %s on %s: %s", who, self.address, error)
        except (EOFError, ConnectionError, asyncio.CancelledError):
            reason = "connection closed"
        except TimeoutError:
            reason = "did not authenticate in time"
            log.warning("closing a connection to %s: %s", self.address, reason)
        finally:
            self._conns.discard(conn)
            conn.close()
        if peer is not None and not self._closed:
            self._queue.put_nowait(PeerLeft(peer, reason))

    async def _authenticate(self, conn: socket.socket, reader: _Reader) -> Peer:
        handshake = ServerHandshake(self._settings.secret)
        while not handshake.done:
            kind, frames = await reader.read()
            try:
                if len(frames) != 1:
                    raise AuthenticationError("handshake messages carry exactly one frame")
                reply = handshake.step(kind, frames[0])
            except AuthenticationError as error:
                with contextlib.suppress(OSError):
                    await _write(conn, Kind.DENIED, [str(error).encode()], 1 << 16)
                raise
            await _write(conn, reply[0], [reply[1]], 1 << 16)
        return Peer(next(self._ids), handshake.peer_name)

    async def receive(self) -> Event:
        return await self._queue.get()

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._accepting.cancel()
        for task in list(self._tasks):
            task.cancel()
        self._sock.close()
        for conn in list(self._conns):
            conn.close()
        if self.address.scheme == "ipc":
            with contextlib.suppress(OSError):
                os.unlink(self.address.path)
        self._queue.put_nowait(ListenerClosed(f"listener on {self.address} is closed"))


class SocketSender(Sender):
    def __init__(self, address: Address, settings: Settings, sock: socket.socket, reader: _Reader) -> None:
        self.address = address
        self._settings = settings
        self._sock = sock
        self._lock = asyncio.Lock()
        self._reason: str | None = None
        self._gone = asyncio.Event()
        self._watch = asyncio.get_running_loop().create_task(self._watch_for_close(reader))

    async def _watch_for_close(self, reader: _Reader) -> None:
        """The listener sends nothing after the handshake: any read ends the connection."""
        try:
            await reader.read()
            reason = "the listener sent data it should not have"
        except (EOFError, ConnectionError, OSError):
            reason = "the listener closed the connection"
        except (DecodeError, MessageTooLarge) as error:
            reason = f"protocol error: {error}"
        except asyncio.CancelledError:
            return
        self._lost(reason)

    def _lost(self, reason: str) -> None:
        if self._reason is None:
            self._reason = reason
            self._gone.set()
            self._sock.close()

    async def send(self, frames: Sequence[Buffer]) -> None:
        if self._reason is not None:
            raise PeerDisconnected(f"connection to {self.address} is gone: {self._reason}")
        async with self._lock:
            try:
                await _write(self._sock, Kind.DATA, frames, self._settings.max_message_size)
            except OSError as error:
                self._lost(f"sending failed: {error}")
                raise PeerDisconnected(f"connection to {self.address} broke: {error}") from error

    @property
    def closed(self) -> bool:
        return self._reason is not None

    async def wait_closed(self) -> str:
        await self._gone.wait()
        return self._reason or "closed"

    async def aclose(self) -> None:
        async with self._lock:
            self._watch.cancel()
            self._lost("closed by this side")


class SocketTransport(Transport):
    name = "socket"

    async def listen(self, address: Address, settings: Settings) -> Listener:
        sock = _stream_socket(address)
        try:
            if address.scheme == "ipc":
                sock.bind(address.path)
            else:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind(("" if address.host == "*" else address.host, address.port))
            sock.listen(1024)
        except OSError as error:
            sock.close()
            raise ConnectError(f"cannot listen on {address}: {error}") from error
        sock.setblocking(False)
        return SocketListener(address, settings, sock)

    async def connect(self, address: Address, settings: Settings) -> Sender:
        loop = asyncio.get_running_loop()
        sock = _stream_socket(address)
        sock.setblocking(False)
        target = address.path if address.scheme == "ipc" else (address.host, address.port)
        try:
            await asyncio.wait_for(loop.sock_connect(sock, target), settings.handshake_timeout)
        except (OSError, TimeoutError) as error:
            sock.close()
            raise ConnectError(f"cannot connect to {address}: {error or 'timed out'}") from error
        reader = _Reader(sock, 1 << 16)
        try:
            await asyncio.wait_for(_client_handshake(sock, reader, settings), settings.handshake_timeout)
        except AuthenticationError:
            sock.close()
            raise
        except TimeoutError as error:
            sock.close()
            raise AuthenticationError(f"{address} did not complete the handshake in time") from error
        except (EOFError, OSError) as error:
            sock.close()
            raise AuthenticationError(f"{address} closed the connection during the handshake") from error
        except BaseException:
            sock.close()
            raise
        return SocketSender(address, settings, sock, reader)


async def _client_handshake(sock: socket.socket, reader: _Reader, settings: Settings) -> None:
    client = ClientHandshake(settings.secret, settings.name)
    await _write(sock, *_one(client.hello()))
    await _write(sock, *_one(client.answer(*_single(await reader.read()))))
    client.check(*_single(await reader.read()))


def _one(step: tuple[int, bytes]) -> tuple[int, list[bytes], int]:
    return step[0], [step[1]], 1 << 16


def _single(message: tuple[int, list[memoryview]]) -> tuple[int, memoryview]:
    kind, frames = message
    if len(frames) != 1:
        raise AuthenticationError("handshake messages carry exactly one frame")
    return kind, frames[0]

