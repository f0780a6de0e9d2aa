"""The plain-socket backend: TCP or Unix stream sockets on the event loop.

Messages are length-prefixed (see ``_wire``). Reads go through one buffer
per connection, so many small messages cost few system calls, while a large
frame is received straight into its own writable buffer: no copies beyond
the kernel's, and the receiver may modify what it got.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import logging
import os
import socket
import ssl
import threading
from collections.abc import Callable, Sequence

from ._address import Address
from ._auth import ClientHandshake, ServerHandshake
from ._buffers import fresh_buffer
from ._errors import (
    AuthenticationError,
    ConnectError,
    DecodeError,
    ListenerClosed,
    MessageTooLarge,
    PeerDisconnected,
    TransportError,
)
from ._event_queue import EventQueue, QueuedListener
from ._integrity import TAG, Opener, Sealer, required
from ._interface import Buffer, Listener, Peer, PeerLeft, Received, Sender, Transport
from ._loop import wake
from ._ratelog import PeerLog, peer_host
from ._registry import register_backend
from ._settings import Settings
from ._wire import (
    HANDSHAKE_MAX,
    HEAD,
    MAX_FRAMES,
    Kind,
    prefix,
    read_lengths,
    sizes,
    small_message,
)

__all__ = ["SocketTransport"]

log = logging.getLogger("monarch.transport.socket")
READ_BUFFER = 1 << 18  # the most a connection's staging buffer grows to
FIRST_READ_BUFFER = 1 << 14  # what it starts at: most connections stay there
SMALL = 1 << 16  # messages up to this size are joined into one write
DIRECT = 1 << 16  # frames from this size on are received in place
SOCKET_BUFFER = 4 << 20  # asked of the kernel for each direction (it may cap it)
CHUNK = 1 << 20  # large frames are written a chunk at a time, so buffering stays small


class _Framer:
    """Cuts the byte stream of an ``asyncio.BufferedProtocol`` into messages.

    The kernel writes into one staging buffer, so many small messages cost
    few system calls; a large frame gets a buffer of its own that the kernel
    writes straight into, so it is copied no more than the kernel copies it,
    and the receiver gets it writable.
    """

    def __init__(self, max_size: int, on_message: Callable[[int, list[memoryview]], None]) -> None:
        self._max = max_size
        self._max_frames = MAX_FRAMES + 1  # + 1: a sealed message's tag
        self._kinds: frozenset[int] | None = None  # None: any kind the wire knows
        self._on_message = on_message
        # bytearray(n) writes its n zeros: every page of it is resident at once
        self._buf = bytearray(FIRST_READ_BUFFER)
        self._start = 0
        self._end = 0
        self._head: tuple[int, list[int], list[memoryview]] | None = None
        self._direct: memoryview | None = None  # a large frame being filled in place
        self._filled = 0
        self._stopped = False

    def stop(self) -> None:
        """Parse nothing more: bytes buffered behind a message that closed the
        connection (one that failed its integrity check, say) are never read."""
        self._stopped = True

    def limit(self, max_size: int, max_frames: int, kinds: frozenset[int] | None) -> None:
        """What the next messages may be. Checked as soon as each byte that
        could break it arrives, so a peer is refused on its first wrong byte,
        not after the bytes it announced."""
        self._max, self._max_frames, self._kinds = max_size, max_frames, kinds

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._direct is not None:
            return self._direct[self._filled :]
        if self._end == len(self._buf):
            self._compact(1)
        return memoryview(self._buf)[self._end :]

    def buffer_updated(self, nbytes: int) -> None:
        if self._stopped:
            return
        full = False
        if self._direct is not None:
            self._filled += nbytes
            if self._filled < len(self._direct):
                return
            assert self._head is not None
            self._head[2].append(self._direct)
            self._direct = None
        else:
            self._end += nbytes
            full = self._end == len(self._buf)
        self._parse()
        if self._direct is None:
            if self._start == self._end:
                # All read: the next bytes go to the front again, so a connection
                # that carries small messages never fills (and grows) its buffer.
                # A controller holds two connections per proc: they stay small.
                self._start = self._end = 0
            if full and len(self._buf) < READ_BUFFER:
                # a burst filled the buffer: double it (up to READ_BUFFER), so
                # that a busy connection reads much per system call
                self._compact(min(READ_BUFFER, 2 * len(self._buf)))

    def _compact(self, need: int) -> None:
        """Move unread bytes to the front, growing the buffer to hold ``need``."""
        unread = self._end - self._start
        if need > len(self._buf):
            self._buf = self._buf[self._start : self._end] + bytearray(need - unread)
        else:
            self._buf[:unread] = self._buf[self._start : self._end]
        self._start, self._end = 0, unread

    def _available(self, need: int) -> bool:
        if self._end - self._start >= need:
            return True
        if self._start + need > len(self._buf):
            self._compact(need)
        return False

    def _parse(self) -> None:
        while not self._stopped:
            if self._head is None:
                buf, start = self._buf, self._start
                have = self._end - start
                if self._kinds is not None and have and buf[start] not in self._kinds:
                    raise DecodeError(f"unexpected message kind {buf[start]}")
                if have < HEAD.size:
                    self._available(HEAD.size)
                    return
                kind, count = HEAD.unpack_from(buf, start)
                if count > self._max_frames:
                    raise DecodeError(f"message announces {count} frames")
                table = HEAD.size + 8 * count
                if have < table:
                    self._available(table)
                    return
                lengths = read_lengths(kind, count, buf, self._max, start + HEAD.size)
                start += table
                size = sum(lengths)
                if count <= 2 and self._end - start >= size:
                    # a whole message of a header and a pickle (no out-of-band
                    # buffer, which wants memory of its own): one copy, cut in views
                    self._start = start + size
                    body = memoryview(buf[start : start + size])
                    if count == 2:
                        first = lengths[0]
                        self._on_message(kind, [body[:first], body[first:]])
                    else:
                        self._on_message(kind, [body] if count else [])
                    continue
                self._start = start
                self._head = (kind, lengths, [])
            kind, lengths, frames = self._head
            while len(frames) < len(lengths):
                length = lengths[len(frames)]
                have = self._end - self._start
                if have >= length:
                    view = memoryview(self._buf)[self._start : self._start + length]
                    frames.append(memoryview(bytearray(view)))
                    self._start += length
                elif length >= DIRECT:
                    out = fresh_buffer(length)
                    out[:have] = memoryview(self._buf)[self._start : self._end]
                    self._start = self._end
                    self._direct, self._filled = out, have
                    return
                else:
                    self._available(length)
                    return
            self._head = None
            self._on_message(kind, frames)


_TAG_SPACE = bytes(TAG)  # where a tag will be, for a head written before it is known
THREADED_TAG = 1 << 20  # from this size a message's tag is computed beside its writing


def _encode(
    kind: int,
    frames: Sequence[Buffer],
    max_size: int,
    sealer: Sealer | None = None,
    *,
    small_only: bool = False,
) -> list[Buffer] | None:
    """What to write: one joined buffer when small, else the prefix and frames;
    with ``small_only``, None for a message that is not small (before sealing
    it: a large message is hashed once, when it goes out).
    With a ``sealer`` the message takes the next sequence number and carries
    its tag as a last frame."""
    sealed = sealer is not None
    lengths = sizes(frames)
    small = HEAD.size + 8 * (len(frames) + sealed) + sum(lengths) + (TAG if sealed else 0) <= SMALL
    if small_only and not small:
        return None
    if sealer is not None:
        tag = sealer.seal(kind, frames)
        frames = [*frames, tag]
        lengths.append(len(tag))
        kind |= Kind.SEALED
        try:
            head = prefix(kind, frames, max_size, lengths)
        except MessageTooLarge:
            sealer.unseal()  # not sent: the number is the next message's
            raise
    else:
        head = prefix(kind, frames, max_size, lengths)
    if small:
        return [b"".join([head, *frames])]
    return [head, *frames]


class _Connection(asyncio.BufferedProtocol):
    """One stream connection. Its owner sets ``on_message`` (each whole
    message) and ``on_lost`` (once, with the reason, when it ends)."""

    def __init__(self, max_size: int) -> None:
        self.framer = _Framer(max_size, _ignore)
        self.transport: asyncio.Transport | None = None
        self.paused = False
        self.drained: collections.deque[asyncio.Future[None]] = collections.deque()
        self.on_lost: Callable[[str], None] = _ignore
        self.reason: str | None = None
        self.refuse: str | None = None  # close at once on arrival, for this reason

    @property
    def on_message(self) -> Callable[[int, list[memoryview]], None]:
        """What gets each whole message: ``on_message(kind, frames)``."""
        return self.framer._on_message

    @on_message.setter
    def on_message(self, handler: Callable[[int, list[memoryview]], None]) -> None:
        self.framer._on_message = handler  # called by the framer itself: no hop between

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass
        if self.refuse is not None:
            self.close(self.refuse)
            return
        transport.set_write_buffer_limits(high=4 * CHUNK)  # type: ignore[attr-defined]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            # big kernel buffers: a large message crosses in a few system calls
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SOCKET_BUFFER)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SOCKET_BUFFER)
            if sock.family != socket.AF_UNIX:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.framer.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        if self.reason is not None:
            return  # closing: whatever still arrives is not ours to read
        try:
            self.framer.buffer_updated(nbytes)
        except (DecodeError, MessageTooLarge, AuthenticationError) as error:
            self.close(f"protocol error: {error}")

    def close(self, reason: str) -> None:
        """End the connection now; ``on_lost`` hears ``reason``."""
        self.framer.stop()
        if self.reason is None:
            self.reason = reason
            self.on_lost(reason)
        if self.transport is not None:
            self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.reason is None:
            self.reason = "connection closed" if exc is None else f"connection broke: {exc}"
            self.on_lost(self.reason)
        while self.drained:
            wake(self.drained.popleft())

    def eof_received(self) -> bool:
        return False  # a half-closed connection is a closed one

    def write(self, kind: int, frames: Sequence[Buffer], max_size: int) -> None:
        assert self.transport is not None
        if self.reason is not None:  # uvloop raises RuntimeError on a closed handle; asyncio drops
            raise PeerDisconnected(f"the connection is gone: {self.reason}")
        pieces = _encode(kind, frames, max_size)
        assert pieces is not None  # only small_only gives None
        for piece in pieces:
            self.transport.write(piece)

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        while self.drained:
            wake(self.drained.popleft())

    async def writable(self) -> None:
        """Wait until the kernel takes more (or the connection ends)."""
        waiter = asyncio.get_running_loop().create_future()
        self.drained.append(waiter)
        await waiter


def _stream_socket(address: Address) -> socket.socket:
    if address.scheme == "ipc":
        return socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    family = socket.AF_INET6 if ":" in address.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


class SocketListener(QueuedListener):
    def __init__(self, address: Address, settings: Settings) -> None:
        self.address = address
        self._settings = settings
        self._queue = EventQueue(settings.queue_depth)
        self._ids = itertools.count(1)
        self._connections: set[_Connection] = set()
        self._unauthenticated = 0  # connections still in their handshake
        self._server: asyncio.Server | None = None
        self._closed = False
        self._seal = True  # settled by start(), from the address bound
        self._peer_log = PeerLog(log)

    async def start(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        context = _ssl_context(self.address, self._settings, server=True)
        self._server = await loop.create_server(self._accept, sock=sock, ssl=context)
        if self.address.family == "tcp":
            self.address = self.address.with_port(sock.getsockname()[1])
        self._seal = _seals(self._settings, self.address)

    def _accept(self) -> _Connection:
        # until it authenticates a peer may send only the handshake's steps,
        # each one small frame: nothing larger is ever allocated for it
        conn = _Connection(HANDSHAKE_MAX)
        conn.framer.limit(HANDSHAKE_MAX, 1, frozenset({Kind.HELLO}))
        if self._unauthenticated >= self._settings.max_unauthenticated:
            conn.refuse = (
                f"{self._unauthenticated} connections are already authenticating "
                "(max_unauthenticated)"
            )
            conn.on_lost = lambda reason: log.warning(
                "refusing a connection on %s: %s", self.address, reason
            )
            return conn
        self._unauthenticated += 1
        handshake = ServerHandshake(self._settings.secret, seal=self._seal)
        peer: Peer | None = None
        opener: Opener | None = None
        loop = asyncio.get_running_loop()
        deadline = loop.call_later(
            self._settings.handshake_timeout, conn.close, "did not authenticate in time"
        )

        def on_message(kind: int, frames: list[memoryview]) -> None:
            nonlocal peer, opener
            if peer is not None:
                if kind == Kind.DATA | Kind.SEALED and opener is not None:
                    try:
                        opener.check(Kind.DATA, frames[:-1], frames[-1])
                    except AuthenticationError as error:
                        conn.close(f"protocol error: {error}")
                        return
                    frames.pop()
                elif kind != Kind.DATA or handshake.seal:
                    conn.close(f"protocol error: unsealed message kind {kind} after the handshake")
                    return
                if self._queue.put(Received(peer, frames)) and conn.transport is not None:
                    conn.transport.pause_reading()  # until the consumer catches up
                    self._queue.when_room(conn.transport.resume_reading)
                return
            try:
                if len(frames) != 1:
                    raise AuthenticationError("handshake messages carry exactly one frame")
                reply = handshake.step(kind, frames[0])
            except AuthenticationError as error:
                conn.write(Kind.DENIED, [str(error).encode()], 1 << 16)
                conn.close(f"authentication failed: {error}")
                return
            conn.write(reply[0], [reply[1]], 1 << 16)
            if handshake.done:
                deadline.cancel()
                self._unauthenticated -= 1
                peer = Peer(next(self._ids), handshake.peer_name)
                opener = Opener(handshake.key)
                conn.framer.limit(
                    self._settings.max_message_size,
                    MAX_FRAMES + 1,
                    frozenset({Kind.DATA, Kind.DATA | Kind.SEALED}),
                )
            else:
                conn.framer.limit(HANDSHAKE_MAX, 1, frozenset({Kind.PROOF, Kind.DENIED}))

        def on_lost(reason: str) -> None:
            deadline.cancel()
            self._connections.discard(conn)
            if peer is None:
                self._unauthenticated -= 1
            hung_up = reason == "connection closed" or reason.startswith("connection broke")
            if peer is None and hung_up:
                # a port probe (a health check) says nothing; a peer whose process ended
                # mid-handshake is no news either: one of another job says so (DENIED)
                # first, and is logged as refused
                log.debug(
                    "a connection on %s closed %s",
                    self.address,
                    "during its handshake" if handshake.heard else "before saying anything",
                )
            elif peer is None and self._closed:  # cut short by closing this listener
                log.debug("a connection on %s in its handshake: %s", self.address, reason)
            elif peer is None:  # one line per peer host now and then, not one per try
                host = peer_host(conn.transport)
                self._peer_log.warning(
                    host,
                    "closing a connection on %s (unauthenticated, from %s): %s",
                    self.address,
                    host or "this host",
                    reason,
                )
            elif reason.startswith(("protocol error", "authentication", "did not")):
                log.warning("closing a connection on %s (%s): %s", self.address, peer, reason)
            if peer is not None and not self._closed:
                self._queue.put(PeerLeft(peer, reason))

        conn.on_message, conn.on_lost = on_message, on_lost
        self._connections.add(conn)
        return conn

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._server is not None:
            self._server.close()
        for conn in list(self._connections):
            conn.close("the listener closed")
        if self.address.scheme == "ipc":
            with contextlib.suppress(OSError):
                os.unlink(self.address.path)
        self._queue.put(ListenerClosed(f"listener on {self.address} is closed"))


class SocketSender(Sender):
    def __init__(
        self, address: Address, settings: Settings, conn: _Connection, sealer: Sealer | None = None
    ) -> None:
        super().__init__(address)
        self._settings = settings
        self._conn = conn
        self._sealer = sealer
        # taking a sequence number and writing its message happen together,
        # whichever thread sends: the listener checks them in wire order
        self._order = threading.Lock()
        self._lock = asyncio.Lock()
        self._loop = asyncio.get_running_loop()
        # where another thread may write: plain sockets only (TLS state lives in the loop)
        transport = conn.transport
        sock = transport.get_extra_info("socket") if transport is not None else None
        tls = transport is not None and transport.get_extra_info("sslcontext") is not None
        self._fd = sock.fileno() if sock is not None and not tls else -1
        # the rest of a message another thread began to write, for the loop to finish
        self._rest: collections.deque[memoryview] = collections.deque()
        conn.on_message = lambda kind, frames: conn.close(
            "protocol error: the listener sent data after the handshake"
        )
        conn.on_lost = self._lose
        if conn.reason is not None:
            self._lose(conn.reason)

    def send_threadsafe(self, frames: Sequence[Buffer]) -> bool:
        conn = self._conn
        if self._fd < 0 or conn.paused or conn.reason or self._lock.locked():
            return False
        if not self._order.acquire(blocking=False):
            return False
        try:
            # looked at again holding the lock: the loop and other threads
            # change these under it, and bytes must never interleave
            transport = conn.transport
            if (
                conn.paused
                or conn.reason
                or transport is None
                or self._lock.locked()
                or self._rest
                or transport.get_write_buffer_size()
            ):
                return False
            pieces = self._small(frames)
            if pieces is None:
                return False  # a large message goes out in chunks, by the loop
            data = pieces[0]
            try:
                written = os.write(self._fd, data)
            except OSError:  # EAGAIN: the kernel is full; anything else: the loop finds out
                self._unseal()
                return False
            if written < len(data):
                # what is left goes out before anything else: it is queued
                # before the lock is let go, and every writer looks here first
                self._rest.append(memoryview(data)[written:])
                self._loop.call_soon_threadsafe(self._finish_rest)
            return True
        finally:
            self._order.release()

    def _unseal(self) -> None:
        if self._sealer is not None:
            self._sealer.unseal()

    def _small(self, frames: Sequence[Buffer]) -> list[Buffer] | None:
        """The message as one write (sealed, taking its number), or None
        when it is large: it then goes out in chunks, from ``send``."""
        if self._sealer is None:
            data = small_message(Kind.DATA, frames, self._settings.max_message_size, SMALL)
            return None if data is None else [data]
        return _encode(
            Kind.DATA, frames, self._settings.max_message_size, self._sealer, small_only=True
        )

    def _finish_rest(self) -> None:
        """On the loop: hand what other threads left unwritten to the
        transport, before anything else goes out."""
        with self._order:
            self._flush_rest()

    def _flush_rest(self) -> None:
        """``_finish_rest`` for a caller on the loop that holds ``_order``."""
        transport = self._conn.transport
        while self._rest:
            if transport is not None and self._conn.reason is None:
                transport.write(self._rest[0])  # written (or buffered) before it leaves _rest
            self._rest.popleft()

    def send_nowait(self, frames: Sequence[Buffer]) -> bool:
        conn = self._conn
        transport = conn.transport
        if conn.paused or self._lock.locked() or conn.reason or transport is None:
            return False
        with self._order:
            self._flush_rest()
            pieces = self._small(frames)
            if pieces is None:
                return False
            transport.write(pieces[0])
        return True

    def send_many_nowait(self, messages: Sequence[Sequence[Buffer]]) -> int:
        conn = self._conn
        transport = conn.transport
        if conn.paused or self._lock.locked() or conn.reason or transport is None:
            return 0
        chunks = []
        with self._order:
            self._flush_rest()
            for frames in messages:
                pieces = self._small(frames)
                if pieces is None:
                    break  # a large message goes out in chunks, by send()
                chunks.append(pieces[0])
            if chunks:
                transport.write(chunks[0] if len(chunks) == 1 else b"".join(chunks))
        return len(chunks)

    async def send(self, frames: Sequence[Buffer]) -> None:
        conn = self._conn
        transport = conn.transport
        idle = not (conn.paused or self._lock.locked() or conn.reason)
        if idle and transport is not None:
            with self._order:
                self._flush_rest()
                pieces = self._small(frames)
                if pieces is not None:
                    transport.write(pieces[0])  # the common case: one small write, nobody waiting
                    return
        async with self._lock:  # a large message goes out in chunks; others wait their turn
            self._finish_rest()  # other threads write nothing while the lock is held
            if self._sealer is None:
                pieces = _encode(Kind.DATA, frames, self._settings.max_message_size)
                assert pieces is not None
                await self._write_chunks(pieces)
                return
            with self._order:
                head = prefix(
                    Kind.DATA | Kind.SEALED, [*frames, _TAG_SPACE], self._settings.max_message_size
                )
                seq = self._sealer.reserve()  # holding the lock: no later message goes first
            if sum(memoryview(f).nbytes for f in frames) < THREADED_TAG:
                tag = self._sealer.tag(seq, Kind.DATA, frames)
                await self._write_chunks([head, *frames, tag])
                return
            # hashing lets go of the GIL: the tag is computed in a worker thread
            # while the frames are written, and goes out last
            pending = self._loop.run_in_executor(None, self._sealer.tag, seq, Kind.DATA, frames)
            try:
                await self._write_chunks([head, *frames])
            finally:
                tag = await pending
            await self._write_chunks([tag])

    async def _write_chunks(self, pieces: Sequence[Buffer]) -> None:
        conn = self._conn
        for piece in pieces:
            view = memoryview(piece).cast("B")
            for start in range(0, max(view.nbytes, 1), CHUNK):
                if conn.paused:
                    await conn.writable()
                if conn.reason is not None or conn.transport is None:
                    raise PeerDisconnected(f"connection to {self.address} is gone: {conn.reason}")
                conn.transport.write(view[start : start + CHUNK])

    async def _hang_up(self) -> None:
        self._finish_rest()
        conn = self._conn
        if conn.reason is None:
            conn.reason = "closed by this side"
            if conn.transport is not None:
                conn.transport.close()  # flushes what is buffered, then closes

    async def _cut(self) -> None:
        self._conn.close(self._reason or "aborted by this side")
        self._finish_rest()  # the connection is closed: what other threads left goes nowhere


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
        listener = SocketListener(address, settings)
        await listener.start(sock)
        return listener

    async def connect(self, address: Address, settings: Settings) -> Sender:
        loop = asyncio.get_running_loop()
        conn = _Connection(1 << 16)
        replies: asyncio.Queue[tuple[int, list[memoryview]] | str] = asyncio.Queue()
        conn.on_message = lambda kind, frames: replies.put_nowait((kind, frames))
        conn.on_lost = replies.put_nowait
        try:
            if address.scheme == "ipc":
                connecting = loop.create_unix_connection(lambda: conn, address.path)
            else:
                context = _ssl_context(address, settings, server=False)
                expect = None if context is None else settings.tls_files(address).server_name
                connecting = loop.create_connection(
                    lambda: conn,
                    address.host,
                    address.port,
                    ssl=context,
                    server_hostname=None if context is None else (expect or address.host),
                )
            await asyncio.wait_for(connecting, settings.handshake_timeout)
        except (OSError, TimeoutError) as error:
            raise ConnectError(f"cannot connect to {address}: {error or 'timed out'}") from error

        async def reply() -> tuple[int, memoryview]:
            got = await replies.get()
            if isinstance(got, str):
                raise AuthenticationError(
                    f"{address} closed the connection during the handshake ({got})"
                )
            kind, frames = got
            if len(frames) != 1:
                raise AuthenticationError("handshake messages carry exactly one frame")
            return kind, frames[0]

        async def handshake() -> ClientHandshake:
            client = ClientHandshake(settings.secret, settings.name)
            conn.write(*_one(client.hello()))
            try:
                answer = client.answer(*await reply())
            except AuthenticationError:
                if client.objection is not None:  # the listener hears why, then the close
                    with contextlib.suppress(TransportError):
                        conn.write(Kind.DENIED, [client.objection], 1 << 16)
                raise
            conn.write(*_one(answer))
            client.check(*await reply())
            return client

        try:
            client = await asyncio.wait_for(handshake(), settings.handshake_timeout)
        except TimeoutError as error:
            conn.close("handshake timed out")
            raise AuthenticationError(
                f"{address} did not complete the handshake in time"
            ) from error
        except BaseException:
            conn.close("handshake failed")
            raise
        seal = client.seal_requested or _seals(settings, address)
        return SocketSender(address, settings, conn, Sealer(client.key) if seal else None)


def _ssl_context(address: Address, settings: Settings, *, server: bool) -> ssl.SSLContext | None:
    """The TLS context for a ``tls+tcp://`` address; ``None`` otherwise.
    Mutual: each side presents a certificate the other's CA signed."""
    if address.scheme != "tls":
        return None
    files = settings.tls_files(address)
    try:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER if server else ssl.PROTOCOL_TLS_CLIENT)
        context.load_cert_chain(files.cert, files.key)
        context.load_verify_locations(files.ca)
        context.verify_mode = ssl.CERT_REQUIRED
    except (OSError, ssl.SSLError) as error:
        raise TransportError(f"cannot load the TLS files for {address}: {error}") from error
    return context


def _seals(settings: Settings, address: Address) -> bool:
    """Whether this end seals (or demands sealed) messages on a connection it
    has to ``address``: by its own address and transport, never the peer's."""
    return required(settings.integrity, address.scheme, address.path or "")


def _one(step: tuple[int, bytes]) -> tuple[int, list[bytes], int]:
    return step[0], [step[1]], 1 << 16


def _ignore(*args: object) -> None:
    pass


register_backend(SocketTransport)
