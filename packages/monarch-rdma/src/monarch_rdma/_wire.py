"""The data-plane wire format and its authentication.

A connection starts with an HMAC challenge-response on the job's secret (the
same secret the actor transport uses, ``$MONARCH_JOB_SECRET``), so nothing of
an unauthenticated peer is acted upon:

    client -> MAGIC, client nonce
    server -> server nonce, HMAC(secret, "server" | client nonce | server nonce)
    client -> HMAC(secret, "client" | server nonce | client nonce)
    server -> OK (one byte), or it closes

Then requests, answered in order. Every request is one fixed header
(``REQUEST``), followed by ``arg_len`` bytes of JSON arguments and, for a
write, ``length`` bytes of data. Every answer is one fixed header
(``ANSWER``); status 0 is followed by the data of a read or ``msg_len``
bytes of JSON, any other status by ``msg_len`` bytes of error text.

The operations the server itself serves are in :class:`Op`; each backend
adds its own (a code of its own, registered with the backend).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import socket
import struct
import time
from typing import Any

from monarch_transport import job_secret

__all__ = [
    "ANSWER",
    "MAGIC",
    "REQUEST",
    "Op",
    "RequestError",
    "Status",
    "answer",
    "answer_json",
    "client_handshake",
    "dropped_message",
    "readonly_message",
    "recv_exact",
    "recv_into_exact",
    "server_handshake",
    "tune",
]

MAGIC = b"MRDMA\x00\x01\x00"
NONCE = 16
MAC = hashlib.sha256().digest_size
REQUEST = struct.Struct("<BxxxIQQQQ")  # op, arg_len, buffer_id, token, offset, length
ANSWER = struct.Struct("<BxxxIQ")  # status, msg_len, value
MAX_ARGS = 1 << 20


SOCKET_BUFFER = 4 << 20


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


def tune(sock: socket.socket) -> None:
    """Socket options of every data-plane connection, both sides."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SOCKET_BUFFER)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SOCKET_BUFFER)


def answer(sock: socket.socket, status: int, message: str = "", value: int = 0) -> None:
    """Send one answer: a status, an integer value and an optional text."""
    text = message.encode()
    sock.sendall(ANSWER.pack(status, len(text), value) + text)


def answer_json(sock: socket.socket, payload: dict[str, Any]) -> None:
    """Send a successful answer that carries JSON."""
    text = json.dumps(payload).encode()
    sock.sendall(ANSWER.pack(Status.OK, len(text), 0) + text)


def _mac(secret: bytes, role: bytes, first: bytes, second: bytes) -> bytes:
    return hmac.new(secret, role + first + second, hashlib.sha256).digest()


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


def client_handshake(sock: socket.socket) -> None:
    """Prove we know the job's secret and check that the server does too."""
    secret = job_secret()
    nonce = os.urandom(NONCE)
    sock.sendall(MAGIC + nonce)
    reply = recv_exact(sock, NONCE + MAC)
    server_nonce, proof = reply[:NONCE], reply[NONCE:]
    if not hmac.compare_digest(proof, _mac(secret, b"server", nonce, server_nonce)):
        raise PermissionError(
            "the RDMA data-plane server does not know this job's secret "
            "(is the buffer from another job?)"
        )
    sock.sendall(_mac(secret, b"client", server_nonce, nonce))
    if recv_exact(sock, 1) != b"\x01":
        raise PermissionError("the RDMA data-plane server refused our proof")


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


def server_handshake(sock: socket.socket, deadline: float) -> None:
    """The server's side, complete by ``deadline`` (``time.monotonic()``)
    whatever the peer's pace; ``PermissionError`` for a peer without the
    secret, ``TimeoutError`` for one too slow."""
    secret = job_secret()
    hello = _recv_by(sock, len(MAGIC) + NONCE, deadline)
    if hello[: len(MAGIC)] != MAGIC:
        raise PermissionError("not an RDMA data-plane client")
    client_nonce = hello[len(MAGIC) :]
    nonce = os.urandom(NONCE)
    sock.sendall(nonce + _mac(secret, b"server", client_nonce, nonce))
    proof = _recv_by(sock, MAC, deadline)
    if not hmac.compare_digest(proof, _mac(secret, b"client", nonce, client_nonce)):
        raise PermissionError("peer does not know this job's secret")
    sock.sendall(b"\x01")
