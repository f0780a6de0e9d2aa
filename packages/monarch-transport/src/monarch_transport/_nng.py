"""The default backend: nng sockets through pynng.

pynng's blocking calls are several times faster than its asyncio ones. A
listener registers nng's receive notification descriptor with the event loop
and drains the socket with non-blocking receives when it fires (measured
faster than a blocking receive thread handing batches to the loop: 275 against
414 µs per round trip); a sender sends without blocking when nng has room and
falls back to a worker thread when it does not. Every connection is a pipe
of a polyamorous PAIR1 socket, so the listener can answer a pipe during the
handshake.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import itertools
import logging
import socket
import struct
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
import pynng
import pynng.nng
from pynng._nng import lib as pynng_lib

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
)
from ._event_queue import EventQueue, QueuedListener
from ._integrity import Opener, Sealer, required
from ._interface import Buffer, Listener, Peer, PeerLeft, Received, Sender, Transport
from ._nng_gate import GreetingGate
from ._ratelog import PeerLog
from ._registry import register_backend
from ._settings import Settings
from ._wire import HANDSHAKE_MAX, Kind, join, prefix, split

__all__ = ["NngTransport"]

log = logging.getLogger("monarch.transport.nng")
OVERHEAD = 1 << 20  # room for the frame table on top of the payload limit
# nng allocates whatever its receive limit allows before anyone is known, so
# the limit is one piece: a larger message crosses as pieces (Kind.PART) that
# only an authenticated peer may send
PIECE = 1 << 20
PART_HEAD = struct.Struct("<BQ")  # Kind.PART, the whole message's length
DEPARTURE_GRACE = 0.1  # seconds between nng's removal notice and our report
SWEEP_INTERVAL = 0.25  # seconds between checks that every known pipe still exists
BYE_TIMEOUT_MS = 2000  # how long a closing sender waits for the listener's answer
REPLY_BUFFER = 256  # replies (handshake steps, BYE_ACKs) a listener queues without blocking
HANDSHAKE_SLICE = 0.1  # seconds a dial waits for a handshake step before looking for its pipe
OBJECTION_WAIT_MS = 1000  # how long a client that refuses a listener waits for it to hear why
TEARDOWN_WAIT = 5.0  # seconds the exit waits for threads to leave nng once it closed their sockets
T = TypeVar("T")


def _url(address: Address) -> str:
    return str(address)


def _tls(address: Address, settings: Settings, *, server: bool) -> dict[str, pynng.TLSConfig]:
    """pynng's TLS configuration for a ``tls+tcp://`` address; none otherwise.
    Mutual TLS: each side presents a certificate the other's CA signed, and
    the traffic is encrypted; the handshake on the job's secret follows."""
    if address.scheme != "tls":
        return {}
    files = settings.tls_files(address)
    ca, cert, key = files.read()
    if server:
        config = pynng.TLSConfig(
            pynng.TLSConfig.MODE_SERVER,
            own_key_string=key,
            own_cert_string=cert,
            ca_string=ca,
            auth_mode=pynng.TLSConfig.AUTH_MODE_REQUIRED,
        )
    else:
        config = pynng.TLSConfig(
            pynng.TLSConfig.MODE_CLIENT,
            server_name=files.server_name or address.host,
            ca_string=ca,
            own_key_string=key,
            own_cert_string=cert,
        )
    return {"tls_config": config}


@dataclass
class _Pipe:
    pipe: pynng.Pipe
    handshake: ServerHandshake
    peer: Peer | None = None
    opener: Opener | None = None  # once authenticated
    partial: memoryview | None = None  # a message arriving in pieces (fresh_buffer)
    expected: int = 0  # its length
    filled: int = 0  # how much of it has arrived
    rejected: bool = False  # closed by us: nothing more of it is read


class NngListener(QueuedListener):
    def __init__(self, address: Address, settings: Settings) -> None:
        self._settings = settings
        self._queue = EventQueue(settings.queue_depth)
        self._peer_log = PeerLog(log)
        self._loop = asyncio.get_running_loop()
        self._ids = itertools.count(1)
        self._pipes: dict[int, _Pipe] = {}  # touched on the event loop only
        self._gone: set[int] = set()
        self._leaving: set[int] = set()  # departures waiting for their grace read
        self._closed = False
        # decided by the listening address, never by a peer's (any local user
        # can connect from 127.0.0.1)
        self._seal = required(settings.integrity, address.scheme, address.path or "")
        self._sock = _opened(
            polyamorous=True,
            recv_max_size=PIECE + (1 << 12),  # a piece, its head and nng's own
            **_tls(address, settings, server=True),
        )
        self._sock.send_timeout = int(settings.handshake_timeout * 1000)  # handshake replies only
        # room for replies sent at once (a job's procs all saying goodbye as it ends):
        # unbuffered, all but the first failed with TryAgain and went by a worker
        # thread, which an exiting interpreter no longer has, so they were dropped
        # and each of those senders waited out its goodbye (2 s)
        self._sock.send_buffer_size = REPLY_BUFFER
        self._sock.add_post_pipe_connect_cb(self._on_connect)
        self._sock.add_post_pipe_remove_cb(self._on_remove)
        self._gate: GreetingGate | None = None
        try:
            if address.scheme == "tcp":
                address = self._listen_gated(address)
            else:
                bound = self._sock.listen(_url(address))
                if address.family == "tcp":  # pynng's own port getter is wrong for IPv6
                    address = address.with_port(int(str(bound.local_address).rpartition(":")[2]))
        except (pynng.NNGException, OSError) as error:
            self._sock.close()
            raise ConnectError(f"cannot listen on {address}: {error}") from error
        self.address = address
        self._fd = self._sock.recv_fd
        self._loop.add_reader(self._fd, self._readable)
        self._sweeper = self._loop.call_later(SWEEP_INTERVAL, self._sweep)

    def _listen_gated(self, address: Address) -> Address:
        """Listen on plain TCP through a ``GreetingGate``: connections are
        counted from ``accept``, and nng gets them (over its ``socket://``
        transport) once they have greeted; the address with its bound port."""
        family = socket.AF_INET6 if ":" in address.host else socket.AF_INET
        listening = socket.socket(family, socket.SOCK_STREAM)
        try:
            listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listening.bind((address.host.strip("[]"), address.port))
            listening.listen(1024)
            listening.setblocking(False)
            nng_side = self._sock.listen("socket://")
        except BaseException:
            listening.close()
            raise

        def admit(fd: int) -> None:
            code = pynng_lib.nng_listener_set_int(nng_side.listener, b"socket:fd", fd)
            if code != 0:
                raise ConnectError(f"nng error {code}")

        address = address.with_port(listening.getsockname()[1])
        self._gate = GreetingGate(
            listening,
            admit,
            self._authenticating,
            limit=self._settings.max_unauthenticated,
            timeout=self._settings.handshake_timeout,
            where=str(address),
        )
        return address

    def _authenticating(self) -> int:
        """Pipes still in their handshake (those closed already do not count)."""
        return sum(state.peer is None and not state.rejected for state in self._pipes.values())

    # -- nng's callbacks run on its threads: hand them to the loop -------------

    def _on_connect(self, pipe: pynng.Pipe) -> None:
        self._loop.call_soon_threadsafe(self._connected, pipe)

    def _on_remove(self, pipe: pynng.Pipe) -> None:
        self._loop.call_soon_threadsafe(self._departed, pipe.id)

    def _state(self, pipe: pynng.Pipe) -> _Pipe | None:
        if pipe.id in self._gone:
            return None  # reported as departed: nothing more of it counts
        state = self._pipes.get(pipe.id)
        if state is None:
            handshake = ServerHandshake(self._settings.secret, seal=self._seal)
            state = self._pipes[pipe.id] = _Pipe(pipe, handshake)
        return state

    def _connected(self, pipe: pynng.Pipe) -> None:
        waiting = self._authenticating()
        if self._gate is not None:
            waiting += self._gate.greeting
            self._gate.handed()
        state = self._state(pipe)
        crowded = waiting >= self._settings.max_unauthenticated
        if state is not None and state.peer is None and crowded:
            self._reject(state, f"{waiting} connections are already authenticating")
            return
        self._loop.call_later(self._settings.handshake_timeout, self._deadline, pipe.id)

    def _deadline(self, pipe_id: int) -> None:
        state = self._pipes.get(pipe_id)
        if state is not None and state.peer is None:
            self._reject(state, "did not authenticate in time")

    def _departed(self, pipe_id: int) -> None:
        """Report a pipe that went away once its last messages are handled.
        nng can announce a removal just before the pipe's final message
        reaches the socket (seen with TCP and TLS), so the report waits a
        moment and reads what the socket holds first: a departure never
        overtakes data, and no message of that pipe can arrive after it."""
        if pipe_id not in self._leaving:
            self._leaving.add(pipe_id)
            self._loop.call_later(DEPARTURE_GRACE, self._report_departure, pipe_id)

    def _sweep(self) -> None:
        """pynng silently drops a removal notice for a pipe it has not
        registered yet, and CI once saw a killed peer go unreported for 5 s;
        so every known pipe is also asked now and then whether nng still has
        it, and a vanished peer is noticed within the interval regardless."""
        for pipe_id, state in list(self._pipes.items()):
            try:
                _ = state.pipe.protocol  # nng looks the pipe up by id: gone means NoEntry
            except pynng.NNGException:
                self._departed(pipe_id)
        if not self._closed:
            self._sweeper = self._loop.call_later(SWEEP_INTERVAL, self._sweep)

    def _report_departure(self, pipe_id: int) -> None:
        self._readable()
        self._leaving.discard(pipe_id)
        state = self._pipes.pop(pipe_id, None)
        self._gone.add(pipe_id)
        if state is not None and state.peer is not None and not self._closed:
            self._queue.put(PeerLeft(state.peer, "connection closed"))
        elif state is not None and not state.rejected and state.handshake.heard:
            # it left in the middle of its handshake: its process ended, say; one of
            # another job says so first (DENIED), and was rejected and logged for it
            log.debug("an unauthenticated peer left %s during its handshake", self.address)

    # -- reading, on the loop, whenever nng says a message waits ----------------

    def _readable(self) -> None:
        while not self._closed:
            try:
                msg = self._sock.recv_msg(block=False)
            except (pynng.TryAgain, pynng.Closed):
                return
            if self._handle(msg):  # the consumer is behind: stop reading for now
                self._loop.remove_reader(self._fd)
                self._queue.when_room(self._resume)
                return

    def _resume(self) -> None:
        if not self._closed:
            self._loop.add_reader(self._fd, self._readable)
            self._readable()

    def _handle(self, msg: pynng.Message) -> bool:
        """Act on one message; whether the event queue is now full."""
        state = self._state(msg.pipe)
        if state is None or state.rejected:
            return False  # messages queued behind one that closed the pipe are dropped
        data = msg.bytes
        if data[:1] == bytes([Kind.PART]) or state.partial is not None:
            whole = self._piece(state, data)
            return False if whole is None else self._whole(state, whole)
        return self._whole(state, data)

    def _piece(self, state: _Pipe, data: bytes) -> memoryview | None:
        """Add one piece of a large message; the message once it is whole."""
        if state.peer is None or len(data) < PART_HEAD.size or data[0] != Kind.PART:
            self._reject(state, "a message in pieces from an unauthenticated peer, or cut short")
            return None
        expected = PART_HEAD.unpack_from(data)[1]
        if state.partial is None:
            if not PIECE < expected <= self._settings.max_message_size + OVERHEAD:
                self._reject(state, f"a message in pieces announced {expected:,} bytes")
                return None
            # all of it at once, in a buffer of its own (huge pages when big)
            state.partial, state.expected, state.filled = fresh_buffer(expected), expected, 0
        size = len(data) - PART_HEAD.size
        if expected != state.expected or state.filled + size > expected:
            self._reject(state, "the pieces of a message do not add up")
            return None
        state.partial[state.filled : state.filled + size] = memoryview(data)[PART_HEAD.size :]
        state.filled += size
        if state.filled < expected:
            return None
        whole, state.partial = state.partial, None
        return whole

    def _whole(self, state: _Pipe, data: bytes | memoryview) -> bool:
        # before the handshake is through only its small steps are read
        limit = HANDSHAKE_MAX if state.peer is None else self._settings.max_message_size
        try:
            kind, frames = split(data, limit)
        except (DecodeError, MessageTooLarge) as error:
            self._reject(state, f"malformed message: {error}")
            return False
        if state.peer is None:
            self._authenticate(state, kind, frames)
            return False
        if kind & Kind.SEALED and state.opener is not None:
            kind &= ~Kind.SEALED
            try:
                state.opener.check(kind, frames[:-1], frames[-1])
            except AuthenticationError as error:
                self._reject(state, str(error))
                return False
            frames.pop()
        elif state.handshake.seal:
            self._reject(state, f"unsealed message kind {kind} after the handshake")
            return False
        if kind == Kind.DATA:
            return self._queue.put(Received(state.peer, frames))
        if kind == Kind.BYE:
            self._reply(state, Kind.BYE_ACK, b"")
        else:
            self._reject(state, f"unexpected message kind {kind} after the handshake")
        return False

    def _authenticate(self, state: _Pipe, kind: int, frames: list[memoryview]) -> None:
        try:
            if len(frames) != 1:
                raise AuthenticationError("handshake messages carry exactly one frame")
            reply = state.handshake.step(kind, frames[0])
        except AuthenticationError as error:
            self._reply(state, Kind.DENIED, str(error).encode())
            self._reject(state, f"authentication failed: {error}")
            return
        if not self._reply(state, *reply):
            self._reject(state, "does not read the handshake's replies")
        elif state.handshake.done:
            state.peer = Peer(next(self._ids), state.handshake.peer_name)
            state.opener = Opener(state.handshake.key)

    def _reply(self, state: _Pipe, kind: int, payload: bytes) -> bool:
        """Answer one pipe without blocking the loop; whether it could be sent."""
        msg = pynng.Message(join(kind, [payload], 1 << 16), state.pipe)
        try:
            self._sock.send_msg(msg, block=False)
        except pynng.TryAgain:  # a new pipe may not take a message at once
            return _in_worker(self._loop, lambda: self._send_late(msg))
        except pynng.NNGException:
            return False
        return True

    def _send_late(self, msg: pynng.Message) -> None:
        with contextlib.suppress(pynng.NNGException):  # it timed out or left: dropped
            self._sock.send_msg(msg)

    def _reject(self, state: _Pipe, why: str) -> None:
        state.rejected = True
        if state.peer is not None:
            log.warning("closing the connection of %s on %s: %s", state.peer, self.address, why)
        else:  # one line per peer host now and then, not one per try
            host = _remote_host(state.pipe)
            self._peer_log.warning(
                host,
                "closing the connection of an unauthenticated peer (from %s) on %s: %s",
                host or "this host",
                self.address,
                why,
            )
        _close_pipe(state.pipe)

    # -- the consumer -------------------------------------------------------------

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            self._sweeper.cancel()
            if self._gate is not None:
                self._gate.close()
            self._loop.remove_reader(self._fd)
            await _off_loop(self._sock.close)
            self._queue.put(ListenerClosed(f"listener on {self.address} is closed"))


def _remote_host(pipe: pynng.Pipe) -> str:
    """The peer's host as nng knows it ('' when it does not say)."""
    try:
        where = pipe.remote_address
        return str(getattr(where, "addr", "") or "")
    except Exception:  # a pipe already gone, a transport without one
        return ""


def _in_worker(loop: asyncio.AbstractEventLoop, work: Callable[[], None]) -> bool:
    """Run ``work`` (a blocking nng call) on a worker thread, off the loop;
    whether a worker could be had. None can once the interpreter is exiting,
    which is just when peers go away in numbers: the caller then decides."""
    try:
        loop.run_in_executor(None, _unless_finishing, work)
    except RuntimeError:  # "cannot schedule new futures after interpreter shutdown"
        return False
    return True


# -- nng is torn down at exit only once no thread of ours is inside it ------------
#
# pynng's exit handler calls nng_fini, which closes every socket and then frees
# nng's timers and threads. A worker thread still inside a blocking call (a
# goodbye waiting for its answer, a send, a dial) wakes with "closed" and
# unwinds through those timers as they are freed: nng panics (SIGABRT), or the
# teardown waits forever on a timer list that never empties. So every blocking
# call runs through ``_inside_nng``, and the exit closes our sockets first,
# waits for those calls to return, refuses new ones, and only then finishes nng.

_sockets: weakref.WeakSet[pynng.Socket] = weakref.WeakSet()
_calls = threading.Condition()
_inside = 0  # blocking nng calls running now (under ``_calls``)
_finishing = False  # the exit began tearing nng down: no call may enter


def _opened(**options: Any) -> pynng.Pair1:
    """A new PAIR1 socket, which the exit closes if nothing else did."""
    sock = pynng.Pair1(**options)
    _sockets.add(sock)
    return sock


def _inside_nng(work: Callable[..., T], *args: Any) -> T:
    """Run ``work`` (blocking nng calls, on a worker thread) where the exit sees
    it: nng is not torn down until it returns."""
    global _inside
    with _calls:
        if _finishing:
            raise pynng.Closed("nng is shutting down: the process exits", pynng_lib.NNG_ECLOSED)
        _inside += 1
    try:
        return work(*args)
    finally:
        with _calls:
            _inside -= 1
            _calls.notify_all()


def _unless_finishing(work: Callable[[], None]) -> None:
    """``_inside_nng(work)`` for work nobody waits on: refused at exit, it is
    dropped (the exit closes every socket itself)."""
    with contextlib.suppress(pynng.Closed):
        _inside_nng(work)


async def _off_loop(work: Callable[..., T], *args: Any) -> T:
    """``work(*args)``, blocking nng calls, on a worker thread (``_inside_nng``)."""
    return await anyio.to_thread.run_sync(_inside_nng, work, *args)


def _finish_nng() -> None:
    """pynng's exit handler, made safe: close every socket (which wakes the
    threads blocked in them), wait for every call to leave nng, then nng_fini.
    A call still inside after ``TEARDOWN_WAIT`` leaves nng as it is: tearing it
    down under that thread would crash the exit, and the system frees it."""
    global _finishing
    with _calls:
        _finishing = True
    for sock in list(_sockets):
        with contextlib.suppress(pynng.NNGException):
            sock.close()
    with _calls:
        quiet = _calls.wait_for(lambda: _inside == 0, TEARDOWN_WAIT)
    if quiet:
        pynng_lib.nng_fini()
    else:
        log.debug("a thread is still inside nng at exit; nng is left to the system")


# in place of pynng's handler (named as in pynng 0.9), which would call nng_fini at once
_pynng_exit = getattr(pynng.nng, "_pynng_atexit", None)
if _pynng_exit is not None:
    atexit.unregister(_pynng_exit)
atexit.register(_finish_nng)


def _close_pipe(pipe: pynng.Pipe) -> None:
    with contextlib.suppress(pynng.NNGException):
        pipe.close()


class NngSender(Sender):
    def __init__(
        self, address: Address, settings: Settings, sock: pynng.Socket, sealer: Sealer | None
    ) -> None:
        super().__init__(address)
        self._settings = settings
        self._sock = sock
        self._sealer = sealer
        # a sequence number is taken and its message handed to nng together,
        # whichever thread sends: the listener checks them in that order
        self._order = threading.Lock()
        self._loop = asyncio.get_running_loop()
        self._lock = asyncio.Lock()
        self._busy = 0  # sends waiting in a worker thread; later sends queue behind them
        self._hanging_up = False  # saying goodbye: losing the listener ends it
        sock.add_post_pipe_remove_cb(self._on_remove)
        if not sock.pipes:  # lost between the handshake and now
            self._lost("the listener closed the connection")

    def _on_remove(self, pipe: pynng.Pipe) -> None:
        self._loop.call_soon_threadsafe(self._lost, "the listener closed the connection")

    def _lost(self, reason: str) -> None:
        if self._reason is None:
            self._lose(reason)
        elif not self._hanging_up:
            return
        # nng would redial on its own (a new connection must authenticate anew),
        # and a goodbye waiting for this listener's answer would wait in vain
        self._close()

    def _close(self) -> None:
        """Close the socket off the loop (which wakes a call blocked in it), or
        on it once the exiting interpreter has no worker left to give."""
        if not _in_worker(self._loop, self._sock.close):
            self._sock.close()

    def send_nowait(self, frames: Sequence[Buffer]) -> bool:
        if self._reason is not None:
            raise PeerDisconnected(f"connection to {self.address} is gone: {self._reason}")
        if self._busy or _in_pieces(frames):
            return False
        with self._order:
            data = self._join(Kind.DATA, frames)
            try:
                self._sock.send(data, block=False)
            except pynng.TryAgain:
                self._unseal()
                return False
            except pynng.Closed:
                raise PeerDisconnected(f"connection to {self.address} is closed") from None
        return True

    def _join(self, kind: int, frames: Sequence[Buffer]) -> bytes:
        """The message as nng takes it, sealed (taking the next sequence
        number) when this connection seals."""
        return b"".join(self._parts(kind, frames))

    def _parts(self, kind: int, frames: Sequence[Buffer]) -> list[Buffer]:
        """The message's bytes, in order (its prefix, frames and tag), sealed
        when this connection seals."""
        head = prefix(kind, frames, self._settings.max_message_size)  # too large: raise first
        if self._sealer is None:
            return [head, *frames]
        tag = self._sealer.seal(kind, frames)
        head = prefix(kind | Kind.SEALED, [*frames, tag], self._settings.max_message_size)
        return [head, *frames, tag]

    def _unseal(self) -> None:
        if self._sealer is not None:
            self._sealer.unseal()

    def send_threadsafe(self, frames: Sequence[Buffer]) -> bool:
        # nng sockets may be used from any thread; order holds while no send
        # of ours waits in a worker thread (``_busy``)
        if self._reason is not None or self._busy or _in_pieces(frames):
            return False
        if not self._order.acquire(blocking=False):
            return False
        try:
            if self._busy:  # the loop queued one meanwhile: it goes first
                return False
            try:
                data = self._join(Kind.DATA, frames)
            except MessageTooLarge:
                return False
            try:
                self._sock.send(data, block=False)
            except pynng.NNGException:
                self._unseal()
                return False
        finally:
            self._order.release()
        return True

    async def send(self, frames: Sequence[Buffer]) -> None:
        if self._reason is not None:
            raise PeerDisconnected(f"connection to {self.address} is gone: {self._reason}")
        with self._order:
            pieces = _pieces(self._parts(Kind.DATA, frames))
            if not self._busy and len(pieces) == 1:
                try:
                    self._sock.send(pieces[0], block=False)
                    return
                except pynng.TryAgain:
                    pass
                except pynng.Closed:
                    raise PeerDisconnected(f"connection to {self.address} is closed") from None
            # sealed already: later sends see ``_busy`` and queue behind this one
            self._busy += 1
        try:
            async with self._lock:
                await _off_loop(self._blocking_send, pieces)
        finally:
            self._busy -= 1

    def _blocking_send(self, pieces: list[bytes]) -> None:
        try:
            for piece in pieces:
                self._sock.send(piece)
        except pynng.Closed:
            raise PeerDisconnected(
                f"connection to {self.address} closed before a message went out"
            ) from None

    async def _hang_up(self) -> None:
        async with self._lock:  # messages already handed to us go out first
            self._hanging_up = True
            if not self._sock.pipes:  # lost meanwhile: nothing to say goodbye to
                self._sock.close()
                return
            await _off_loop(self._say_goodbye)

    async def _cut(self) -> None:
        self._close()  # which wakes a send blocked on the peer

    def _say_goodbye(self) -> None:
        """nng may close a socket before its last messages are written (seen
        with TLS): say BYE and wait for the listener's answer, which comes once
        everything sent before it has been read, then close."""
        try:
            self._sock.recv_timeout = self._sock.send_timeout = BYE_TIMEOUT_MS
            with self._order:
                self._sock.send(self._join(Kind.BYE, []))
            while split(self._sock.recv(), 1 << 16)[0] != Kind.BYE_ACK:
                pass
        except (pynng.NNGException, DecodeError, MessageTooLarge):
            pass  # gone already, or too slow to answer: close regardless
        finally:
            self._sock.close()


def _in_pieces(frames: Sequence[Buffer]) -> bool:
    """Whether a message is too large for one nng message (so it goes out
    in pieces, from the loop's ``send``)."""
    return sum(memoryview(f).nbytes for f in frames) + (1 << 11) > PIECE


def _pieces(parts: Sequence[Buffer]) -> list[bytes]:
    """What nng sends for one message (``parts``, its bytes in order): the
    message, or its pieces, each headed with Kind.PART and the whole length;
    every byte is copied once."""
    views = [memoryview(part).cast("B") for part in parts]
    total = sum(view.nbytes for view in views)
    if total <= PIECE:
        return [b"".join(views)]
    pieces: list[bytes] = []
    piece: list[Buffer] = [PART_HEAD.pack(Kind.PART, total)]
    room = PIECE
    for view in views:
        while view.nbytes:
            take, view = view[:room], view[room:]
            piece.append(take)
            room -= take.nbytes
            if room == 0:
                pieces.append(b"".join(piece))
                piece, room = [PART_HEAD.pack(Kind.PART, total)], PIECE
    if room < PIECE:
        pieces.append(b"".join(piece))
    return pieces


class NngTransport(Transport):
    name = "nng"

    async def listen(self, address: Address, settings: Settings) -> Listener:
        return NngListener(address, settings)

    async def connect(self, address: Address, settings: Settings) -> Sender:
        sock, client = await _off_loop(_dial_and_authenticate, address, settings)
        seal = client.seal_requested or required(
            settings.integrity, address.scheme, address.path or ""
        )
        return NngSender(address, settings, sock, Sealer(client.key) if seal else None)


def _dial_and_authenticate(
    address: Address, settings: Settings
) -> tuple[pynng.Pair1, ClientHandshake]:
    sock = _opened(recv_max_size=1 << 16, **_tls(address, settings, server=False))
    sock.recv_timeout = int(settings.handshake_timeout * 1000)
    sock.send_timeout = int(settings.handshake_timeout * 1000)
    try:
        try:
            sock.dial(_url(address), block=True)
        except pynng.NNGException as error:
            raise ConnectError(f"cannot connect to {address}: {error}") from error
        deadline = time.monotonic() + settings.handshake_timeout
        client = ClientHandshake(settings.secret, settings.name)
        _send(sock, *client.hello())
        try:
            answer = client.answer(*_listeners_step(sock, address, deadline))
        except AuthenticationError:
            if client.objection is not None:
                _object(sock, client.objection)
            raise
        _send(sock, *answer)
        client.check(*_listeners_step(sock, address, deadline))
    except (pynng.Timeout, pynng.Closed) as error:
        sock.close()
        raise AuthenticationError(f"{address} did not complete the handshake: {error}") from error
    except BaseException:
        sock.close()
        raise
    sock.recv_timeout = -1
    sock.send_timeout = -1
    return sock, client


def _listeners_step(
    sock: pynng.Socket, address: Address, deadline: float
) -> tuple[int, memoryview]:
    """The listener's next handshake message. Should its connection go
    meanwhile (its process ended), nng would wait for a redial until the
    handshake's deadline, holding up whoever dialed (a process exiting as
    its job ends): the wait is in slices, and ends once nng has no pipe."""
    while True:
        left = deadline - time.monotonic()
        sock.recv_timeout = max(1, int(min(left, HANDSHAKE_SLICE) * 1000))
        try:
            return _receive(sock)
        except pynng.Timeout:
            if time.monotonic() >= deadline:
                raise
            if not sock.pipes:
                raise AuthenticationError(
                    f"{address} closed the connection during the handshake"
                ) from None


def _object(sock: pynng.Socket, objection: bytes) -> None:
    """Tell a listener that failed our check why, before closing: nng may
    close a socket before its last message is written (seen with TLS), so
    wait for the listener to answer (it refuses us back) or hang up."""
    with contextlib.suppress(pynng.NNGException, DecodeError, MessageTooLarge):
        sock.recv_timeout = OBJECTION_WAIT_MS
        _send(sock, Kind.DENIED, objection)
        _receive(sock)


def _send(sock: pynng.Socket, kind: int, payload: bytes) -> None:
    sock.send(join(kind, [payload], 1 << 16))


def _receive(sock: pynng.Socket) -> tuple[int, memoryview]:
    kind, frames = split(sock.recv(), 1 << 16)
    if len(frames) != 1:
        raise AuthenticationError("handshake messages carry exactly one frame")
    return kind, frames[0]


register_backend(NngTransport)
