"""The ``tcp`` backend: the owner's data-plane server moves the bytes.

Works between any two hosts that can open a TCP connection. A large
transfer is cut into pieces spread over ``tcp_streams`` parallel
connections; on each, every request is sent before the first answer is
read (pipelined), and data is received straight into the destination
memory and sent straight from the source memory (no copies in Python).
"""

from __future__ import annotations

import atexit
import collections
import json
import os
import socket
import threading
import time
from typing import Any

from ._config import get_config
from ._errors import (
    RDMABufferDropped,
    RDMAOwnerGone,
    RDMATimeoutError,
    RDMATransferError,
)
from ._memory import LocalMemory
from ._registry import Handle
from ._server import tune
from ._wire import ANSWER, REQUEST, Op, Status, client_handshake, recv_exact, recv_into_exact

__all__ = ["TcpBackend", "request"]

MIN_PIECE = 1 << 20
CONNECT_TIMEOUT = 10.0


class _Pool:
    """Idle authenticated connections, per server address."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.idle: dict[tuple[str, int], collections.deque[socket.socket]] = {}

    def acquire(self, address: tuple[str, int], deadline: float) -> socket.socket:
        with self.lock:
            idle = self.idle.get(address)
            if idle:
                return idle.pop()
        timeout = max(0.001, min(CONNECT_TIMEOUT, deadline - time.monotonic()))
        sock = socket.create_connection(address, timeout=timeout)
        try:
            tune(sock)
            client_handshake(sock)
        except BaseException:
            sock.close()
            raise
        return sock

    def release(self, address: tuple[str, int], sock: socket.socket) -> None:
        with self.lock:
            self.idle.setdefault(address, collections.deque()).append(sock)

    def clear(self) -> None:
        with self.lock:
            for idle in self.idle.values():
                for sock in idle:
                    sock.close()
            self.idle.clear()


_pool = _Pool()


def _error(handle: Handle, status: int, message: str) -> RDMATransferError:
    if status == Status.DROPPED:
        return RDMABufferDropped(message)
    return RDMATransferError(message)


def _wrap(handle: Handle, error: BaseException, deadline: float) -> BaseException:
    """A socket failure as the error a user can act on."""
    owner = handle.owner
    where = f"pid {owner.pid} on {owner.hostname} ({owner.tcp[0]}:{owner.tcp[1]})"
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


def _settimeout(sock: socket.socket, deadline: float) -> None:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("deadline passed")
    sock.settimeout(left)


def _answer(sock: socket.socket, handle: Handle, deadline: float) -> tuple[int, bytes]:
    _settimeout(sock, deadline)
    status, msg_len, value = ANSWER.unpack(recv_exact(sock, ANSWER.size))
    message = recv_exact(sock, msg_len) if msg_len else b""
    if status != Status.OK:
        raise _error(handle, status, message.decode(errors="replace"))
    return value, message


def request(
    handle: Handle,
    op: int,
    deadline: float,
    args: dict[str, Any] | None = None,
    offset: int = 0,
    length: int = 0,
) -> tuple[int, dict[str, Any]]:
    """One small request to the owner's server: returns (value, JSON answer)."""
    arg_bytes = json.dumps(args).encode() if args else b""
    address = handle.owner.tcp
    try:
        sock = _pool.acquire(address, deadline)
    except OSError as error:
        raise _wrap(handle, error, deadline) from error
    try:
        _settimeout(sock, deadline)
        header = REQUEST.pack(op, len(arg_bytes), handle.buffer_id, handle.token, offset, length)
        sock.sendall(header + arg_bytes)
        value, message = _answer(sock, handle, deadline)
    except RDMATransferError:
        sock.close()
        raise
    except OSError as error:
        sock.close()
        raise _wrap(handle, error, deadline) from error
    _pool.release(address, sock)
    return value, (json.loads(message) if message else {})


def _stream(
    handle: Handle,
    local: LocalMemory,
    pieces: list[tuple[int, int, int]],
    write: bool,
    deadline: float,
) -> None:
    """Move ``pieces`` (local offset, remote offset, length) over one connection."""
    address = handle.owner.tcp
    try:
        sock = _pool.acquire(address, deadline)
    except OSError as error:
        raise _wrap(handle, error, deadline) from error
    try:
        _settimeout(sock, deadline)
        op = Op.WRITE if write else Op.READ
        if write:
            for local_offset, remote_offset, length in pieces:
                header = REQUEST.pack(op, 0, handle.buffer_id, handle.token, remote_offset, length)
                if length <= MIN_PIECE:
                    sock.sendall(header + local.view(local_offset, length))
                else:
                    sock.sendall(header)
                    _settimeout(sock, deadline)
                    sock.sendall(local.view(local_offset, length))
            for _ in pieces:
                _answer(sock, handle, deadline)
        else:
            sock.sendall(
                b"".join(
                    REQUEST.pack(op, 0, handle.buffer_id, handle.token, remote_offset, length)
                    for _, remote_offset, length in pieces
                )
            )
            for local_offset, _, length in pieces:
                _answer(sock, handle, deadline)
                _settimeout(sock, deadline)
                recv_into_exact(sock, local.view(local_offset, length))
    except RDMATransferError:
        sock.close()
        raise
    except OSError as error:
        sock.close()
        raise _wrap(handle, error, deadline) from error
    _pool.release(address, sock)


def plan(nbytes: int, streams: int, chunk: int) -> list[list[tuple[int, int]]]:
    """Cut ``[0, nbytes)`` into pieces of at most ``chunk`` bytes (none under
    ``MIN_PIECE`` unless the whole is), dealt round-robin to at most
    ``streams`` connections. Each piece is (offset, length)."""
    if nbytes <= 0:
        return []
    piece = max(MIN_PIECE, min(chunk, -(-nbytes // streams)))
    pieces = [(start, min(piece, nbytes - start)) for start in range(0, nbytes, piece)]
    lanes = min(streams, len(pieces))
    return [pieces[i::lanes] for i in range(lanes)]


class TcpBackend:
    name = "tcp"

    def available(self) -> bool:
        return True

    def unsupported(self, handle: Handle, local: LocalMemory) -> str | None:
        return None

    def transfer(
        self,
        handle: Handle,
        local: LocalMemory,
        remote_offset: int,
        nbytes: int,
        write: bool,
        deadline: float,
    ) -> None:
        if local.is_cuda:
            from ._cuda import staged

            with staged(local, nbytes, write) as host:
                self.transfer(handle, host, remote_offset, nbytes, write, deadline)
            return
        config = get_config()
        lanes = plan(nbytes, config.tcp_streams, config.chunk_bytes)
        jobs = [
            [(offset, remote_offset + offset, length) for offset, length in lane] for lane in lanes
        ]
        if len(jobs) == 1:
            _stream(handle, local, jobs[0], write, deadline)
            return
        errors: list[BaseException] = []

        def run(job: list[tuple[int, int, int]]) -> None:
            try:
                _stream(handle, local, job, write, deadline)
            except BaseException as error:
                errors.append(error)

        threads = [threading.Thread(target=run, args=(job,), daemon=True) for job in jobs[1:]]
        for thread in threads:
            thread.start()
        run(jobs[0])
        for thread in threads:
            thread.join()
        if errors:
            raise errors[0]


def _after_fork() -> None:
    global _pool
    _pool = _Pool()


os.register_at_fork(after_in_child=_after_fork)
atexit.register(lambda: _pool.clear())
