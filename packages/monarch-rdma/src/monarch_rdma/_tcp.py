"""The ``tcp`` backend: the owner's data-plane server moves the bytes.

Works between any two hosts that can open a TCP connection. A large
transfer is cut into pieces spread over ``tcp_streams`` parallel
connections; on each, every request is sent before the first answer is
read (pipelined: one round trip per connection). On an unsealed connection
(loopback, or integrity ``off``) data is received straight into the
destination memory and sent straight from the source memory (no copies in
Python). On a sealed one (see ``_wire``) nothing unchecked is used: the
owner stages a write's data until its tag checks, then copies it into
place, and sends a read from a snapshot (so the tag is over exactly the
bytes sent, even while a write races the read); the reader receives a read
in place and fails the transfer if its tag does not check. Pieces are then
at most ``SEALED_PIECE``, so checking one overlaps the arrival of the next.
CUDA memory is staged through host memory on either side.

Owner side: the operations ``READ`` and ``WRITE`` of the data-plane server.
"""

from __future__ import annotations

import ctypes
import functools
from dataclasses import replace

import monarch_rdma._backends as _backends
import monarch_rdma._control as _control
import monarch_rdma._parallel as _parallel

from ._backend import OwnerRequest, Transfer
from ._config import get_config
from ._cuda_memory import from_host, staged, to_host
from ._errors import RDMATcpFallbackWarning
from ._handle import Handle
from ._identity import this_host
from ._memory import LocalMemory
from ._regions import Region
from ._server import check_bounds
from ._wire import (
    ANSWER,
    COALESCE,
    MAX_DATA,
    Channel,
    RequestError,
    Status,
    answer,
    integrity_mode,
    readonly_message,
    request_header,
    staged_view,
    staging,
    tags_required,
)

__all__ = ["READ", "WRITE", "TcpBackend", "plan"]

READ = 1  # data-plane operation: answer ``length`` bytes from ``offset``
WRITE = 2  # data-plane operation: ``length`` bytes follow the header, stored at ``offset``
MIN_PIECE = 1 << 20
SEALED_PIECE = 4 << 20  # the most one piece carries on a sealed connection (a socket buffer)

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


def _stream(t: Transfer, pieces: list[tuple[int, int]]) -> None:
    """Move ``pieces`` of ``t`` (offset, length; the same offset on both
    sides, counted from ``t.remote_offset`` remotely) over one connection."""
    handle, deadline = t.handle, t.deadline

    def header(offset: int, length: int) -> bytes:
        op = WRITE if t.write else READ
        return request_header(
            op, handle.buffer_id, handle.token, t.remote_offset + offset, length, data=t.write
        )

    with _control.connection(handle, deadline) as chan:
        if t.write:
            for offset, length in pieces:
                _control.set_deadline(chan, deadline)
                chan.send([header(offset, length), b"", t.local.view(offset, length)])
            for _ in pieces:
                _control.read_answer(chan, handle, deadline)
        else:
            chan.send(*([header(offset, length), b"", b""] for offset, length in pieces))
            for offset, length in pieces:
                _control.read_answer(chan, handle, deadline, t.local.view(offset, length))


class TcpBackend:
    """Transfers served by the owner's data-plane server, any two hosts."""

    name = "tcp"

    def available(self) -> bool:
        return True

    def unsupported(self, handle: Handle, local: LocalMemory) -> str | None:
        return None

    def transfer(self, t: Transfer) -> None:
        if t.local.is_cuda:
            with staged(t.local, t.nbytes, t.write) as host:
                self.transfer(replace(t, local=host))
            return
        config = get_config()
        # Sealed, each piece is checked whole at the other end before it is used:
        # smaller pieces let that check (and the owner's copy out of staging)
        # run while the next piece arrives.
        sealed = tags_required(integrity_mode(), "tcp", t.handle.owner.server[0])
        chunk = min(config.chunk_bytes, SEALED_PIECE if sealed else MAX_DATA)
        lanes = plan(t.nbytes, config.tcp_streams, chunk)
        _parallel.run_all([functools.partial(_stream, t, lane) for lane in lanes])


# -- the owner's side -----------------------------------------------------------------------


def _serve_read(chan: Channel, request: OwnerRequest) -> None:
    region = request.registered()
    offset, length = request.offset, request.length
    check_bounds(region, offset, length)
    memory = region.memory
    header = ANSWER.pack(Status.OK, 0, 0)
    if memory.is_cuda:
        with region.touching():
            copy, view = to_host(memory, offset, length)
        chan.send([header, view])
        del copy
        return
    # A snapshot first, sealed or not: the memory is touched only while it is
    # copied (``drop()`` waits for that, never for a slow peer), and the tag
    # and the bytes sent are the same bytes even while a write races the read
    # (which may see either, but must not fail its check for it).
    if length < COALESCE:
        small = ctypes.create_string_buffer(length)
        with region.touching():
            ctypes.memmove(small, memory.addr + offset, length)
        chan.send([header, small.raw[:length]])
        return
    buf = staging.take(length)
    try:
        with region.touching():
            ctypes.memmove(ctypes.addressof(buf), memory.addr + offset, length)
        chan.send([header, staged_view(buf, length)])
    finally:
        staging.give(buf)


def _writable(request: OwnerRequest) -> Region:
    region = request.registered()
    if region.memory.readonly:
        raise RequestError(Status.READONLY, readonly_message(request.buffer_id))
    check_bounds(region, request.offset, request.length)
    return region


def _serve_write(chan: Channel, request: OwnerRequest) -> None:
    data = request.payload
    if data is None or data.nbytes != request.length:
        raise RequestError(Status.BAD_REQUEST, "a tcp write request must carry its data")
    region = _writable(request)  # refused: the server discards the data
    memory = region.memory
    # staged by the server (its tag, when sealed, has checked): only the copy touches the buffer
    with region.touching():
        if memory.is_cuda:
            from_host(memory, request.offset, data.host())
        else:
            data.store(memory.addr + request.offset)
    answer(chan, Status.OK)


# -- registration ---------------------------------------------------------------------------


def _disabled(config: _backends.Switches) -> str | None:
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
