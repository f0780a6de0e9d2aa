"""The control client: authenticated connections to an owner's data-plane
server, and one-request exchanges over them.

Every backend that needs the owner's help goes through here: ``drop()`` from
a holder, the atomics, the ibverbs queue-pair exchange, the CUDA copies.
The tcp backend streams its data over the same pooled connections
(:func:`connection`). Peers on the owner's host that need the owner to know
who they are (cma: a lease, a write the owner copies in, ``ALLOW_ATTACH``;
cuda_ipc) connect to the owner's Unix socket instead (``local=True``),
where the kernel tells the owner their pid. Socket failures become the ``RDMAError`` a user can
act on: a timeout, an owner that is gone, a dropped buffer; an answer that
fails its integrity check (a sealed connection, see ``_wire``) fails the
transfer with an ``RDMATransferError`` that says so, and is logged.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

from monarch_transport import IntegrityError

from ._backend import PairRefused
from ._errors import RDMABufferDropped, RDMAOwnerGone, RDMATimeoutError, RDMATransferError
from ._handle import Handle
from ._wire import (
    ANSWER,
    MAX_ANSWER,
    Channel,
    Status,
    client_handshake,
    request_header,
    tune,
)

__all__ = [
    "Address",
    "as_rdma_error",
    "connection",
    "dedicated",
    "exchange",
    "exchange_raw",
    "read_answer",
    "request",
    "set_deadline",
    "tell",
]

log = logging.getLogger("monarch.rdma.client")
CONNECT_TIMEOUT = 10.0
RETRY_FIRST_PAUSE = 0.01  # a connection closed in its handshake is tried again after this
RETRY_MAX_PAUSE = 0.5


Address = tuple[str, int] | str  # TCP (host, port), or the path of the owner's Unix socket


def _connect(address: Address, timeout: float) -> socket.socket:
    if isinstance(address, str):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(timeout)
            sock.connect(address)
        except BaseException:
            sock.close()
            raise
        return sock
    return socket.create_connection(address, timeout=timeout)


def _open(address: Address, deadline: float) -> Channel:
    """A new authenticated connection to the server at ``address``.

    A server closes new connections at once while too many are in their
    handshake (see ``_server``); a burst of honest peers may meet that, so a
    connection closed during the handshake is tried again, with a growing
    pause, until ``deadline``. A refused connection is not: nobody listens."""
    pause = RETRY_FIRST_PAUSE
    while True:
        timeout = max(0.001, min(CONNECT_TIMEOUT, deadline - time.monotonic()))
        sock = _connect(address, timeout)
        try:
            tune(sock)
            if isinstance(address, str):
                chan = client_handshake(sock, "ipc", address)
            else:
                chan = client_handshake(sock, "tcp", address[0])
            set_deadline(chan, deadline)
            return chan
        except (ConnectionResetError, ConnectionAbortedError, BrokenPipeError):
            sock.close()
            if time.monotonic() + pause >= deadline:
                raise
        except BaseException:
            sock.close()
            raise
        time.sleep(pause)
        pause = min(pause * 2, RETRY_MAX_PAUSE)


class _Pool:
    """Idle authenticated connections, per server address."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.idle: dict[Address, collections.deque[Channel]] = {}

    def acquire(self, address: Address, deadline: float) -> Channel:
        with self.lock:
            idle = self.idle.get(address)
            if idle:
                return idle.pop()
        return _open(address, deadline)

    def release(self, address: Address, sock: Channel) -> None:
        with self.lock:
            self.idle.setdefault(address, collections.deque()).append(sock)

    def clear(self) -> None:
        with self.lock:
            for idle in self.idle.values():
                for sock in idle:
                    sock.close()
            self.idle.clear()


_pool = _Pool()


def _where(handle: Handle) -> str:
    owner = handle.owner
    return f"pid {owner.pid} on {owner.hostname} ({owner.server[0]}:{owner.server[1]})"


def as_rdma_error(handle: Handle, error: BaseException, deadline: float) -> BaseException:
    """A socket failure as the error a user can act on."""
    where = _where(handle)
    if isinstance(error, TimeoutError | socket.timeout) or time.monotonic() >= deadline:
        return RDMATimeoutError(
            f"RDMA transfer with buffer {handle.buffer_id} timed out (owner {where}); "
            "pass a larger timeout= if the transfer is just slow"
        )
    if isinstance(error, PermissionError):
        return RDMATransferError(str(error))
    return RDMAOwnerGone(
        f"the owner of RDMA buffer {handle.buffer_id} ({where}) cannot be reached: {error}. "
        "Its process has probably exited; the buffer is gone with it."
    )


def set_deadline(sock: Channel, deadline: float) -> None:
    """Let the next socket operation block until ``deadline`` at most."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("deadline passed")
    sock.settimeout(left)


def _address(handle: Handle, local: bool) -> Address:
    if not local:
        return handle.owner.server
    if not handle.owner.local:
        raise RDMATransferError(
            f"the owner of RDMA buffer {handle.buffer_id} ({_where(handle)}) has no Unix socket "
            "(an older version?); same-host transfers with it go over tcp"
        )
    return handle.owner.local


@contextlib.contextmanager
def connection(handle: Handle, deadline: float, local: bool = False) -> Iterator[Channel]:
    """A pooled connection to ``handle``'s owner, returned to the pool when
    the block completes; closed (and the failure mapped to an ``RDMAError``)
    when it does not, since the stream may be mid-message. ``local``: to
    the owner's Unix socket (same host), where the owner knows our pid."""
    address = _address(handle, local)
    try:
        sock = _pool.acquire(address, deadline)
    except OSError as error:
        raise as_rdma_error(handle, error, deadline) from error
    try:
        set_deadline(sock, deadline)
        yield sock
    except RDMATransferError:
        sock.close()
        raise
    except OSError as error:
        sock.close()
        raise as_rdma_error(handle, error, deadline) from error
    except BaseException:
        sock.close()
        raise
    _pool.release(address, sock)


def read_answer(
    sock: Channel, handle: Handle, deadline: float, into: memoryview | None = None
) -> tuple[int, bytes]:
    """One answer: (value, message); an error status raises its ``RDMAError``.
    ``into``: where a successful answer's data goes (a read's, as long as
    ``into``), received in place; a sealed connection's answer is checked
    before this returns, and one that fails raises (``into`` then holds
    bytes nobody vouches for)."""
    set_deadline(sock, deadline)
    header = sock.receive(ANSWER.size)
    status, msg_len, value = ANSWER.unpack(header)
    body: bytes | memoryview
    if status == Status.OK and into is not None:
        body = into
        sock.receive_into(into)
    elif msg_len > MAX_ANSWER:
        raise RDMATransferError(
            f"the owner of RDMA buffer {handle.buffer_id} ({_where(handle)}) sent a malformed "
            f"answer ({msg_len} bytes of text, the most is {MAX_ANSWER}); the connection is closed"
        )
    else:
        body = sock.receive(msg_len)
    try:
        sock.verify([header, body])
    except IntegrityError as error:
        log.warning(
            "an answer from the RDMA data-plane server at %s (owner of buffer %d) failed its "
            "integrity check (%s); closing the connection",
            sock.peer,
            handle.buffer_id,
            error,
        )
        raise RDMATransferError(
            f"an answer from the owner of RDMA buffer {handle.buffer_id} ({_where(handle)}) "
            f"failed its integrity check ({error}): something on the network path between "
            "the two hosts altered, injected, replayed or dropped traffic. The transfer "
            "failed (a read's destination may hold bytes that were not checked) and the "
            "connection was closed; retry, and look at the network path if it happens again"
        ) from error
    if status != Status.OK:
        text = bytes(body).decode(errors="replace")
        if status == Status.DROPPED:
            raise RDMABufferDropped(text)
        if status == Status.DENIED:  # the system refuses this way for this pair: try another
            raise PairRefused(text)
        raise RDMATransferError(text)
    return value, bytes(body) if into is None else b""


def exchange(
    sock: Channel,
    handle: Handle,
    op: int,
    deadline: float,
    args: dict[str, Any] | None = None,
    offset: int = 0,
    length: int = 0,
) -> tuple[int, dict[str, Any]]:
    """One small request on ``sock``: returns (value, JSON answer)."""
    arg_bytes = json.dumps(args).encode() if args else b""
    value, message = exchange_raw(sock, handle, op, deadline, arg_bytes, offset, length)
    return value, (json.loads(message) if message else {})


def exchange_raw(
    sock: Channel,
    handle: Handle,
    op: int,
    deadline: float,
    arg_bytes: bytes = b"",
    offset: int = 0,
    length: int = 0,
) -> tuple[int, bytes]:
    """One small request on ``sock`` whose arguments are JSON already
    encoded: returns (value, the answer's text as sent)."""
    header = request_header(op, handle.buffer_id, handle.token, offset, length, len(arg_bytes))
    sock.send([header, arg_bytes, b""])
    return read_answer(sock, handle, deadline)


def tell(
    sock: Channel,
    handle: Handle,
    op: int,
    args: dict[str, Any] | None = None,
    offset: int = 0,
    length: int = 0,
) -> None:
    """Send a ``QUIET`` request on ``sock``: nothing is answered when it
    succeeds (a failure closes the connection, which the next exchange on
    it then meets)."""
    arg_bytes = json.dumps(args).encode() if args else b""
    header = request_header(
        op, handle.buffer_id, handle.token, offset, length, len(arg_bytes), quiet=True
    )
    sock.send([header, arg_bytes, b""])


def request(
    handle: Handle,
    op: int,
    deadline: float,
    args: dict[str, Any] | None = None,
    offset: int = 0,
    length: int = 0,
    local: bool = False,
) -> tuple[int, dict[str, Any]]:
    """One small request to the owner's server, on a pooled connection
    (``local``: to its Unix socket): returns (value, JSON answer)."""
    with connection(handle, deadline, local) as sock:
        return exchange(sock, handle, op, deadline, args, offset, length)


def dedicated(handle: Handle, deadline: float, local: bool = False) -> Channel:
    """A new authenticated connection to ``handle``'s owner, never pooled:
    for what the owner creates for us and keeps only while the connection
    lives (an ibverbs queue pair). Closing it releases those."""
    try:
        return _open(_address(handle, local), deadline)
    except OSError as error:
        raise as_rdma_error(handle, error, deadline) from error


def _after_fork() -> None:
    global _pool
    _pool = _Pool()  # the parent's connections belong to the parent


os.register_at_fork(after_in_child=_after_fork)
atexit.register(lambda: _pool.clear())
