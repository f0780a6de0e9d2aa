"""The ``tcp`` backend: the owner's data-plane server moves the bytes.

Works between any two hosts that can open a TCP connection. A large
transfer is cut into pieces spread over ``tcp_streams`` parallel
connections; on each, every request is sent before the first answer is
read (pipelined: one round trip per connection), and data is received
straight into the destination memory and sent straight from the source
memory (no copies in Python). CUDA memory is staged through host memory on
either side.

Owner side: the operations ``READ`` and ``WRITE`` of the data-plane server.
"""

from __future__ import annotations

import functools
import socket

import monarch_rdma._backends as _backends
import monarch_rdma._control as _control
import monarch_rdma._parallel as _parallel

from ._backend import OwnerRequest
from ._config import RdmaConfig, get_config
from ._cuda_memory import from_host, staged, to_host
from ._errors import RDMATcpFallbackWarning
from ._handle import Handle
from ._identity import this_host
from ._memory import LocalMemory, host_view
from ._regions import Region
from ._server import check_bounds
from ._wire import (
    ANSWER,
    REQUEST,
    RequestError,
    Status,
    answer,
    readonly_message,
    recv_into_exact,
)

__all__ = ["READ", "WRITE", "TcpBackend", "plan"]

READ = 1  # data-plane operation: answer ``length`` bytes from ``offset``
WRITE = 2  # data-plane operation: ``length`` bytes follow the header, stored at ``offset``
MIN_PIECE = 1 << 20
SMALL = 64 << 10  # a read this small is answered in one segment
DRAIN = 1 << 20

FALLBACK_MESSAGE = (
    "No ibverbs RDMA hardware detected. Falling back to TCP transport, which has "
    "significantly lower throughput and higher latency than native RDMA. To disable this "
    "fallback and fail explicitly, call monarch_rdma.configure(allow_tcp_fallback=False)."
)


# -- the reader's side ----------------------------------------------------------------------


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


def _stream(
    handle: Handle,
    local: LocalMemory,
    remote_offset: int,
    pieces: list[tuple[int, int]],
    write: bool,
    deadline: float,
) -> None:
    """Move ``pieces`` (offset, length; the same offset on both sides,
    counted from ``remote_offset`` remotely) over one connection."""
    op = WRITE if write else READ

    def header(offset: int, length: int) -> bytes:
        return REQUEST.pack(op, 0, handle.buffer_id, handle.token, remote_offset + offset, length)

    with _control.connection(handle, deadline) as sock:
        if write:
            for offset, length in pieces:
                if length <= MIN_PIECE:
                    sock.sendall(header(offset, length) + local.view(offset, length))
                else:
                    sock.sendall(header(offset, length))
                    _control.set_deadline(sock, deadline)
                    sock.sendall(local.view(offset, length))
            for _ in pieces:
                _control.read_answer(sock, handle, deadline)
        else:
            sock.sendall(b"".join(header(offset, length) for offset, length in pieces))
            for offset, length in pieces:
                _control.read_answer(sock, handle, deadline)
                _control.set_deadline(sock, deadline)
                recv_into_exact(sock, local.view(offset, length))


class TcpBackend:
    """Transfers served by the owner's data-plane server, any two hosts."""

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
            with staged(local, nbytes, write) as host:
                self.transfer(handle, host, remote_offset, nbytes, write, deadline)
            return
        config = get_config()
        lanes = plan(nbytes, config.tcp_streams, config.chunk_bytes)
        _parallel.run_all(
            [
                functools.partial(_stream, handle, local, remote_offset, lane, write, deadline)
                for lane in lanes
            ]
        )


# -- the owner's side -----------------------------------------------------------------------


def _serve_read(conn: socket.socket, request: OwnerRequest) -> None:
    region = request.registered()
    offset, length = request.offset, request.length
    check_bounds(region, offset, length)
    memory = region.memory
    if memory.is_cuda:
        staging, view = to_host(memory, offset, length)
        conn.sendall(ANSWER.pack(Status.OK, 0, 0))
        conn.sendall(view)
        del staging
        return
    view = host_view(memory.addr + offset, length)
    if length <= SMALL:  # one segment for a small read
        conn.sendall(ANSWER.pack(Status.OK, 0, 0) + bytes(view))
        return
    conn.sendall(ANSWER.pack(Status.OK, 0, 0))
    conn.sendall(view)


def _writable(request: OwnerRequest) -> Region:
    region = request.registered()
    if region.memory.readonly:
        raise RequestError(Status.READONLY, readonly_message(request.buffer_id))
    check_bounds(region, request.offset, request.length)
    return region


def _serve_write(conn: socket.socket, request: OwnerRequest) -> None:
    offset, length = request.offset, request.length
    try:
        region = _writable(request)
    except RequestError:
        scratch = memoryview(bytearray(min(length, DRAIN) or 1))
        left = length
        while left:  # keep the stream in step: the data follows the header regardless
            n = min(left, len(scratch))
            recv_into_exact(conn, scratch[:n])
            left -= n
        raise
    memory = region.memory
    if memory.is_cuda:
        staging = bytearray(length)
        recv_into_exact(conn, memoryview(staging))
        from_host(memory, offset, memoryview(staging))
    else:
        recv_into_exact(conn, host_view(memory.addr + offset, length))
    answer(conn, Status.OK)


# -- registration ---------------------------------------------------------------------------


def _disabled(config: RdmaConfig) -> str | None:
    if config.allow_tcp_fallback:
        return None
    return "the TCP fallback is disabled (allow_tcp_fallback=False)"


def _across_hosts(handle: Handle) -> Warning | None:
    """Monarch's warning, when tcp is chosen because nothing faster reaches another host."""
    if handle.owner.host_key == this_host():
        return None
    return RDMATcpFallbackWarning(FALLBACK_MESSAGE)


_backends.register(
    _backends.Registration(
        TcpBackend(),
        rank=40,
        owner_ops={READ: _serve_read, WRITE: _serve_write},
        disabled=_disabled,
        selection_warning=_across_hosts,
    )
)
