"""The data-plane wire format, its authentication and its integrity.

A connection starts with an HMAC challenge-response on the job's secret (the
same secret the actor transport uses, ``$MONARCH_JOB_SECRET``), so nothing of
an unauthenticated peer is acted upon:

    client -> MAGIC, client nonce                                  (the hello)
    server -> server nonce, flags,
              HMAC(secret, "server" | client nonce | server nonce | flags)
    client -> flags, HMAC(secret, "client" | server nonce | client nonce | flags)
    server -> OK (one byte), or it closes

Each side's flags say whether it demands that every message after the
handshake be sealed (``SEAL``); the connection is sealed when either side
demands it. The flags are inside the proofs, so a relay that does not know
the secret cannot strip the demand: the proof would fail.

Then requests, answered in order. Every request is one fixed header
(``REQUEST``), followed by ``arg_len`` bytes of JSON arguments and, when its
flags say ``DATA`` (a write), ``length`` bytes of data. Every answer is one
fixed header (``ANSWER``); status 0 is followed by the data of a read or
``msg_len`` bytes of JSON, any other status by ``msg_len`` bytes of error
text.

On a sealed connection every request and every answer ends with a 16-byte
tag over all its parts (the frames header, arguments, data for a request;
header, body for an answer) and an implicit sequence number of its
direction (``monarch_transport.Sealer``/``Opener``), under keys derived from
the secret and both sides' handshake messages, one per direction. A request
whose tag fails is not served: the server answers ``INTEGRITY`` and closes.
An answer whose tag fails fails the transfer. Whether a side demands tags
follows the transport's setting, ``$MONARCH_TRANSPORT_INTEGRITY``, and the
transport's policy (``monarch_transport.integrity_required``), decided by
what each side knows of its *own* end: the address the server listens on,
the address the client dialed, never the peer's source address (any local
user can connect from 127.0.0.1). With ``auto``, every TCP connection is
sealed, loopback included; a Unix socket in a folder only this user may
enter (the owner's, mode 0700) is not, since no other user can connect to
it or sit between.

An owner also listens on such a Unix socket, for the peers of its own host:
there the kernel tells it who connected (``SO_PEERCRED``: the peer's pid and
uid, at ``connect()``), so the requests that act on a process (``ALLOW_ATTACH``,
a same-host write the owner copies in from the writer) act on the process at
the other end of the connection, never on one a request names.

A request flagged ``QUIET`` is not answered when it succeeds (a lease's
release, sent as the transfer ends); one that fails closes the connection.

The operations the server itself serves are in :class:`Op`; each backend
adds its own (a code of its own, registered with the backend).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import ctypes
import hashlib
import hmac
import json
import os
import socket
import struct
import threading
import time
from collections.abc import Iterator, Sequence
from types import TracebackType
from typing import Any

from monarch_transport import Opener, Sealer, derive_key, integrity_required, job_secret
from monarch_transport import integrity_mode as transport_integrity_mode

from ._memory import host_view

__all__ = [
    "ANSWER",
    "COALESCE",
    "DATA",
    "INTEGRITY_ENV",
    "MAGIC",
    "MAX_ANSWER",
    "MAX_ARGS",
    "MAX_DATA",
    "QUIET",
    "REQUEST",
    "TAG",
    "Channel",
    "Op",
    "Payload",
    "RequestError",
    "Staging",
    "Status",
    "answer",
    "answer_json",
    "client_handshake",
    "dropped_message",
    "integrity_mode",
    "peer_credentials",
    "readonly_message",
    "recv_exact",
    "recv_into_exact",
    "request_header",
    "server_handshake",
    "staged_view",
    "staging",
    "tags_required",
    "tune",
]

MAGIC = b"MRDMA\x00\x02\x00"
NONCE = 16
MAC = hashlib.sha256().digest_size
SEAL = 0x01  # handshake flag: this side demands sealed messages
TAG = 16  # bytes of a sealed message's tag
REQUEST = struct.Struct("<BBxxIQQQQ")  # op, flags, arg_len, buffer_id, token, offset, length
DATA = 0x01  # request flag: ``length`` bytes of data follow the arguments
QUIET = 0x02  # request flag: no answer when it succeeds; a failure closes the connection
ANSWER = struct.Struct("<BxxxIQ")  # status, msg_len, value
MAX_ARGS = 1 << 20
MAX_ANSWER = 1 << 20  # longest JSON or error text an answer may carry
MAX_DATA = 64 << 20  # longest data one request may carry (a sealed one is staged whole)
INTEGRITY_ENV = "MONARCH_TRANSPORT_INTEGRITY"  # the transport's setting: one policy for both

SOCKET_BUFFER = 4 << 20
COALESCE = 64 << 10  # frames under this size are sent together in one call
OVERLAP = 1 << 20  # messages from this size are tagged in another thread while they are sent
IDLE_STAGING = 256 << 20  # staging memory kept for reuse, at most


class _Kind:
    """The kind each tag is computed with: a request's tag never checks as an answer's."""

    REQUEST = 1
    ANSWER = 2


class Op:
    """The operations every owner's server serves, whatever the backends.
    Backends own the other codes (tcp: 1, 2; ibverbs: 7; cuda_ipc: 8)."""

    DROP = 3
    PING = 4
    FETCH_ADD = 5  # args: {"add": int}
    COMPARE_SWAP = 6  # args: {"compare": int, "swap": int}


class Status:
    OK = 0
    DROPPED = 1
    BOUNDS = 2
    BAD_REQUEST = 3
    FAILED = 4
    READONLY = 5
    INTEGRITY = 6  # the request failed its integrity check: not served, the server closes
    DENIED = 7  # the kernel refused the owner access to the peer (cma: EPERM); use another way


class RequestError(Exception):
    """A request the owner refuses: answered with ``status`` and the message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def dropped_message(buffer_id: int) -> str:
    return (
        f"buffer {buffer_id} is not registered at its owner: it was dropped (RDMABuffer.drop()) "
        "or its owner restarted"
    )


def readonly_message(buffer_id: int) -> str:
    return (
        f"buffer {buffer_id} is read-only: it was registered from read-only memory, so its "
        "owner refuses writes to it (read it, or register writable memory)"
    )


def request_header(
    op: int,
    buffer_id: int,
    token: int,
    offset: int = 0,
    length: int = 0,
    arg_len: int = 0,
    data: bool = False,
    quiet: bool = False,
) -> bytes:
    """A request's fixed header; ``data``: ``length`` bytes of data follow;
    ``quiet``: no answer is sent if it succeeds."""
    flags = (DATA if data else 0) | (QUIET if quiet else 0)
    return REQUEST.pack(op, flags, arg_len, buffer_id, token, offset, length)


def tune(sock: socket.socket) -> None:
    """Socket options of every data-plane connection, both sides."""
    with contextlib.suppress(OSError):
        if sock.family != socket.AF_UNIX:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SOCKET_BUFFER)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SOCKET_BUFFER)


# -- when messages are sealed ---------------------------------------------------------------


def integrity_mode() -> str:
    """``$MONARCH_TRANSPORT_INTEGRITY`` (``always``, ``auto`` or ``off``;
    ``auto`` when unset): the actor transport's setting, read by the transport."""
    return transport_integrity_mode()


def tags_required(mode: str, scheme: str, where: str) -> bool:
    """Whether ``mode`` demands sealed messages on this side's end of a
    connection: the transport's own policy, by what this side knows of it.

    Args:
        mode: ``always``, ``auto`` or ``off`` (:func:`integrity_mode`).
        scheme: ``"tcp"``, or ``"ipc"`` for the owner's Unix socket.
        where: the address this side listens on (the server) or dialed
            (the client): a host, or the Unix socket's path. Never the
            peer's source address.
    """
    return integrity_required(mode, scheme, where)


def peer_credentials(sock: socket.socket) -> tuple[int, int, int]:
    """(pid, uid, gid) of the process that connected to Unix socket ``sock``,
    as the kernel recorded them at ``connect()`` (``SO_PEERCRED``): what the
    peer is, not what it says."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, gid = struct.unpack("3i", raw)
    return pid, uid, gid


# -- one connection -------------------------------------------------------------------------

Buffer = bytes | bytearray | memoryview

_tagging_lock = threading.Lock()
_tagging: concurrent.futures.ThreadPoolExecutor | None = None


def _tagger() -> concurrent.futures.ThreadPoolExecutor:
    """Threads that compute a large message's tag while it is being sent
    (the MAC lets go of the GIL). They never wait for anything else."""
    global _tagging
    with _tagging_lock:
        if _tagging is None:
            _tagging = concurrent.futures.ThreadPoolExecutor(
                max_workers=8, thread_name_prefix="monarch-rdma-tag"
            )
        return _tagging


def recv_into_exact(sock: socket.socket, view: memoryview) -> None:
    """Fill ``view`` from ``sock``; ``ConnectionError`` if the peer closes first."""
    got, size = 0, len(view)
    while got < size:
        n = sock.recv_into(view[got:], size - got)
        if n == 0:
            raise ConnectionResetError(
                f"the peer closed the connection after {got} of {size} bytes"
            )
        got += n


def recv_exact(sock: socket.socket, size: int) -> bytes:
    data = bytearray(size)
    recv_into_exact(sock, memoryview(data))
    return bytes(data)


class Channel:
    """One authenticated data-plane connection: its socket and, when the
    handshake sealed it, the sealer of what this side sends and the opener
    of what it receives. A message is sent whole with :meth:`send`; one is
    received part by part (:meth:`receive`, :meth:`receive_into`), then
    :meth:`verify` reads its tag and checks it over the parts as received,
    raising ``monarch_transport.IntegrityError`` on a mismatch."""

    def __init__(
        self,
        sock: socket.socket,
        peer: str,
        sealer: Sealer | None = None,
        opener: Opener | None = None,
        *,
        server: bool = False,
        peer_pid: int | None = None,
    ) -> None:
        self.sock = sock
        self.peer = peer  # host:port, for messages
        # the peer's pid, from the kernel (SO_PEERCRED) on the owner's Unix socket; None on TCP
        self.peer_pid = peer_pid
        self._sealer = sealer
        self._opener = opener
        self._send_kind, self._receive_kind = (
            (_Kind.ANSWER, _Kind.REQUEST) if server else (_Kind.REQUEST, _Kind.ANSWER)
        )
        self._muted: list[str] | None = None

    @contextlib.contextmanager
    def muted(self) -> Iterator[list[str]]:
        """Within the block, answers are not sent: a ``QUIET`` request's
        success goes unanswered, and its failures are collected in the list
        yielded (the server then closes the connection)."""
        failures: list[str] = []
        self._muted = failures
        try:
            yield failures
        finally:
            self._muted = None

    @property
    def sealed(self) -> bool:
        return self._sealer is not None

    def settimeout(self, timeout: float | None) -> None:
        self.sock.settimeout(timeout)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Channel:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def send(self, *messages: Sequence[Buffer]) -> None:
        """Send ``messages`` (each a sequence of frames), each followed by
        its tag when sealed. Small frames go out together; a large frame is
        sent from where it lies, its message's tag computed meanwhile in
        another thread. The frames must not change until this returns."""
        if self._muted is not None:  # the answers of a QUIET request
            for frames in messages:
                status = ANSWER.unpack(bytes(memoryview(frames[0])[: ANSWER.size]))[0]
                if status != Status.OK:
                    text = bytes(frames[1]).decode(errors="replace") if len(frames) > 1 else ""
                    self._muted.append(text or f"status {status}")
            return
        pending: list[Buffer] = []
        for frames in messages:
            sealer = self._sealer
            large = sealer is not None and sum(memoryview(f).nbytes for f in frames) >= OVERLAP
            if sealer is None or not large:
                tag = sealer.seal(self._send_kind, frames) if sealer is not None else b""
                self._frames(frames, pending)
                pending.append(tag)
                continue
            seq = sealer.reserve()
            tagging = _tagger().submit(sealer.tag, seq, self._send_kind, frames)
            try:
                self._frames(frames, pending)
            finally:
                tag = tagging.result()  # also on failure: the frames are read until then
            pending.append(tag)
        self._flush(pending)

    def _frames(self, frames: Sequence[Buffer], pending: list[Buffer]) -> None:
        for frame in frames:
            if memoryview(frame).nbytes < COALESCE:
                pending.append(frame)
            else:
                self._flush(pending)
                self.sock.sendall(frame)

    def _flush(self, pending: list[Buffer]) -> None:
        if pending:
            data = b"".join(pending)
            pending.clear()
            if data:
                self.sock.sendall(data)

    def receive_into(self, view: memoryview) -> None:
        recv_into_exact(self.sock, view)

    def poll(self, seconds: float) -> None:
        """Return once something can be received, or after ``seconds``,
        without sleeping: for a reply expected within microseconds, where
        waking a sleeping thread would cost more than the wait."""
        until = time.perf_counter() + seconds
        self.sock.settimeout(0.0)
        while time.perf_counter() < until:
            try:
                self.sock.recv(1, socket.MSG_PEEK)
            except BlockingIOError:
                continue
            except OSError:
                return  # the receive that follows meets it too
            return  # something to receive, or the peer closed: the receive tells which

    def receive(self, size: int) -> bytes:
        return recv_exact(self.sock, size) if size else b""

    def verify(self, frames: Sequence[Buffer]) -> None:
        """Read the tag that ends the message just received as ``frames``
        and check it (nothing on an unsealed connection)."""
        if self._opener is not None:
            tag = recv_exact(self.sock, TAG)
            self._opener.check(self._receive_kind, frames, tag)


def answer(chan: Channel, status: int, message: str = "", value: int = 0) -> None:
    """Send one answer: a status, an integer value and an optional text."""
    text = message.encode()
    chan.send([ANSWER.pack(status, len(text), value), text])


def answer_json(chan: Channel, payload: dict[str, Any]) -> None:
    """Send a successful answer that carries JSON."""
    text = json.dumps(payload).encode()
    chan.send([ANSWER.pack(Status.OK, len(text), 0), text])


# -- staged data ----------------------------------------------------------------------------


class Staging:
    """Host memory for data that must be whole before it is used: a sealed
    write's data until its tag checks, a sealed read's snapshot. Buffers are
    kept for reuse (a fresh one costs a page fault every 4 KiB on first
    touch), up to ``IDLE_STAGING`` bytes of them."""

    def __init__(self, idle: int = IDLE_STAGING) -> None:
        self._limit = idle
        self.reset()

    def reset(self) -> None:
        """Forget every buffer (a forked child: the lock may have been held)."""
        self._lock = threading.Lock()
        self._idle: list[ctypes.Array[ctypes.c_char]] = []

    def take(self, size: int) -> ctypes.Array[ctypes.c_char]:
        """A buffer of at least ``size`` bytes (give it back when done)."""
        with self._lock:
            fits = [buf for buf in self._idle if len(buf) >= size]
            if fits:
                buf = min(fits, key=len)
                self._idle.remove(buf)
                return buf
        return (ctypes.c_char * max(size, 1))()

    def give(self, buf: ctypes.Array[ctypes.c_char]) -> None:
        with self._lock:
            self._idle.append(buf)
            self._idle.sort(key=len)
            while sum(len(b) for b in self._idle) > self._limit:
                self._idle.pop()  # the largest goes first


staging = Staging()


def staged_view(buf: ctypes.Array[ctypes.c_char], size: int) -> memoryview:
    return host_view(ctypes.addressof(buf), size)


class Payload:
    """The data of a request flagged ``DATA`` (a write), as its handler
    finds it: on a sealed connection already received into staging memory
    and checked (nothing of a message is served before its tag checks); on
    an unsealed one still on the socket, received straight into the memory
    it is stored in. A handler uses it once, or not at all: the server
    discards what is left, so the connection stays in step."""

    def __init__(self, chan: Channel, nbytes: int, staged: memoryview | None = None) -> None:
        self.chan = chan
        self.nbytes = nbytes
        self._staged = staged
        self._used = False

    def store(self, addr: int) -> None:
        """Put the data into host memory at ``addr``."""
        self._use()
        if self._staged is None:
            self.chan.receive_into(host_view(addr, self.nbytes))
        elif self.nbytes:  # memmove lets go of the GIL: other connections copy meanwhile
            ctypes.memmove(addr, _address(self._staged), self.nbytes)

    def host(self) -> memoryview:
        """The data, in host memory (to copy elsewhere: device memory)."""
        self._use()
        if self._staged is not None:
            return self._staged
        data = memoryview(bytearray(self.nbytes))
        self.chan.receive_into(data)
        return data

    def discard(self) -> None:
        """Drop the data unused (idempotent; a no-op once used)."""
        if self._used:
            return
        self._used = True
        if self._staged is not None:
            return
        scratch = memoryview(bytearray(min(self.nbytes, 1 << 20) or 1))
        left = self.nbytes
        while left:
            n = min(left, len(scratch))
            self.chan.receive_into(scratch[:n])
            left -= n

    def _use(self) -> None:
        if self._used:
            raise RuntimeError("a request's data was used twice")
        self._used = True


def _address(view: memoryview) -> int:
    return ctypes.addressof(ctypes.c_char.from_buffer(view))


# -- the handshake --------------------------------------------------------------------------


def _mac(secret: bytes, role: bytes, first: bytes, second: bytes) -> bytes:
    return hmac.new(secret, role + first + second, hashlib.sha256).digest()


def _channel(
    sock: socket.socket, peer: str, secret: bytes, hello: bytes, server_nonce: bytes,
    sealed: bool, server: bool, peer_pid: int | None = None,
) -> Channel:  # fmt: skip
    if not sealed:
        return Channel(sock, peer, server=server, peer_pid=peer_pid)
    requests = derive_key(secret, hello, server_nonce, label=b"rdma requests")
    answers = derive_key(secret, hello, server_nonce, label=b"rdma answers")
    if server:
        return Channel(sock, peer, Sealer(answers), Opener(requests), server=True,
                       peer_pid=peer_pid)  # fmt: skip
    return Channel(sock, peer, Sealer(requests), Opener(answers))


def _peer_name(sock: socket.socket) -> str:
    try:
        address = sock.getpeername()
    except OSError:
        return "an unknown peer"
    if isinstance(address, tuple):
        host = str(address[0])
        return f"[{host}]:{address[1]}" if ":" in host else f"{host}:{address[1]}"
    return str(address) or "a local peer"


def client_handshake(sock: socket.socket, scheme: str, where: str) -> Channel:
    """Prove we know the job's secret, check that the server does too, and
    agree on sealing (``scheme``, ``where``: the address we dialed, for the
    policy: ``"tcp"`` and the server's host, or ``"ipc"`` and its path)."""
    secret = job_secret()
    demand = SEAL if tags_required(integrity_mode(), scheme, where) else 0
    nonce = os.urandom(NONCE)
    hello = MAGIC + nonce
    sock.sendall(hello)
    reply = recv_exact(sock, NONCE + 1 + MAC)
    server_nonce, server_flags, proof = reply[:NONCE], reply[NONCE : NONCE + 1], reply[NONCE + 1 :]
    if not hmac.compare_digest(proof, _mac(secret, b"server", nonce, server_nonce + server_flags)):
        raise PermissionError(
            f"the RDMA data-plane server at {_peer_name(sock)} could not prove it knows this "
            "job's secret, or its reply was altered on the way (is the buffer from another "
            "job? is something on the network path rewriting traffic?)"
        )
    flags = bytes([demand])
    sock.sendall(flags + _mac(secret, b"client", server_nonce, nonce + flags))
    if recv_exact(sock, 1) != b"\x01":
        raise PermissionError("the RDMA data-plane server refused our proof")
    sealed = bool((server_flags[0] | demand) & SEAL)
    return _channel(sock, _peer_name(sock), secret, hello, server_nonce, sealed, server=False)


def _recv_by(sock: socket.socket, size: int, deadline: float) -> bytes:
    """``size`` bytes, all of them by ``deadline`` (``time.monotonic()``):
    a peer that sends one byte at a time cannot stretch the wait."""
    data = bytearray(size)
    view, got = memoryview(data), 0
    while got < size:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"handshake not completed in time ({got} of {size} bytes)")
        sock.settimeout(left)
        n = sock.recv_into(view[got:], size - got)
        if n == 0:
            raise ConnectionResetError(
                f"the peer closed the connection after {got} of {size} bytes"
            )
        got += n
    return bytes(data)


def server_handshake(
    sock: socket.socket, deadline: float, scheme: str, where: str, peer_pid: int | None = None
) -> Channel:
    """The server's side, complete by ``deadline`` (``time.monotonic()``)
    whatever the peer's pace; ``PermissionError`` for a peer without the
    secret, ``TimeoutError`` for one too slow. ``scheme``, ``where``: the
    address this server listens on (``"tcp"`` and its host, ``"ipc"`` and
    its path), for the policy: never the peer's source address.
    ``peer_pid``: the peer's pid as the kernel says (Unix socket only)."""
    secret = job_secret()
    demand = SEAL if tags_required(integrity_mode(), scheme, where) else 0
    hello = _recv_by(sock, len(MAGIC) + NONCE, deadline)
    if hello[: len(MAGIC)] != MAGIC:
        raise PermissionError("not an RDMA data-plane client (or one of another version)")
    client_nonce = hello[len(MAGIC) :]
    nonce = os.urandom(NONCE)
    flags = bytes([demand])
    sock.sendall(nonce + flags + _mac(secret, b"server", client_nonce, nonce + flags))
    reply = _recv_by(sock, 1 + MAC, deadline)
    client_flags, proof = reply[:1], reply[1:]
    if not hmac.compare_digest(proof, _mac(secret, b"client", nonce, client_nonce + client_flags)):
        raise PermissionError("peer does not know this job's secret")
    sock.sendall(b"\x01")
    sealed = bool((client_flags[0] | demand) & SEAL)
    return _channel(sock, _peer_name(sock), secret, hello, nonce, sealed, server=True,
                    peer_pid=peer_pid)  # fmt: skip


def _after_fork() -> None:
    global _tagging
    _tagging = None  # the parent's threads do not exist in a forked child
    staging.reset()


os.register_at_fork(after_in_child=_after_fork)
