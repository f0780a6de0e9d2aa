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
"""

from __future__ import annotations

import hashlib
import hmac
import os
import socket
import struct

from monarch_transport import job_secret

__all__ = [
    "ANSWER",
    "MAGIC",
    "REQUEST",
    "Op",
    "Status",
    "client_handshake",
    "recv_exact",
    "recv_into_exact",
    "server_handshake",
]

MAGIC = b"MRDMA\x00\x01\x00"
NONCE = 16
MAC = hashlib.sha256().digest_size
REQUEST = struct.Struct("<BxxxIQQQQ")  # op, arg_len, buffer_id, token, offset, length
ANSWER = struct.Struct("<BxxxIQ")  # status, msg_len, value
MAX_ARGS = 1 << 20


class Op:
    READ = 1
    WRITE = 2
    DROP = 3
    PING = 4
    FETCH_ADD = 5  # args: {"add": int}
    COMPARE_SWAP = 6  # args: {"compare": int, "swap": int}
    IBV_CONNECT = 7  # args: the reader's queue pair; answer: the owner's and the MR keys
    CUDA_IPC = 8  # answer: the CUDA IPC handle of the buffer's storage


class Status:
    OK = 0
    DROPPED = 1
    BOUNDS = 2
    BAD_REQUEST = 3
    FAILED = 4
    READONLY = 5


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


def server_handshake(sock: socket.socket) -> None:
    """The server's side; ``PermissionError`` for a peer without the secret."""
    secret = job_secret()
    hello = recv_exact(sock, len(MAGIC) + NONCE)
    if hello[: len(MAGIC)] != MAGIC:
        raise PermissionError("not an RDMA data-plane client")
    client_nonce = hello[len(MAGIC) :]
    nonce = os.urandom(NONCE)
    sock.sendall(nonce + _mac(secret, b"server", client_nonce, nonce))
    proof = recv_exact(sock, MAC)
    if not hmac.compare_digest(proof, _mac(secret, b"client", nonce, client_nonce)):
        raise PermissionError("peer does not know this job's secret")
    sock.sendall(b"\x01")
