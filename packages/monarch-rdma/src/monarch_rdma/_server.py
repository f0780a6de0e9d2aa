"""The owner's data-plane server: one listening socket per process, started
on the first registration, with a thread per connection. It runs apart from
the actor runtime: transfers never pass through a mailbox, and the owner's
actors are never invoked or blocked by them.

The server itself serves what every owner must, whatever the backends:
``PING``, ``DROP`` and the 64-bit atomics. Every other operation belongs to
a backend and is found in the registry of backends (``_backends``).
"""

from __future__ import annotations

import ctypes
import json
import logging
import socket
import threading
from typing import Any

from monarch_transport import default_listen_address

from . import _backends
from ._backend import OwnerRequest
from ._config import get_config
from ._regions import Region, RegionTable
from ._wire import (
    MAX_ARGS,
    REQUEST,
    Op,
    RequestError,
    Status,
    answer,
    dropped_message,
    recv_exact,
    recv_into_exact,
    server_handshake,
    tune,
)

__all__ = ["DataServer", "bind_host", "check_bounds", "start"]

log = logging.getLogger("monarch.rdma.server")
HANDSHAKE_TIMEOUT = 10.0
IO_TIMEOUT = 120.0  # longest a started transfer may stall before the server gives up on it
U64 = (1 << 64) - 1


def bind_host() -> str:
    """Where the server listens: configured, else where the actor runtime
    listens (a host others already reach us on), else loopback."""
    configured = get_config().tcp_host
    if configured:
        return configured
    address = default_listen_address()
    if address.scheme in ("tcp", "tls") and address.host not in ("", "*"):
        return address.host
    return "127.0.0.1"


class DataServer:
    """The listening socket and its threads, serving one table of regions."""

    def __init__(self, regions: RegionTable, host: str) -> None:
        self.regions = regions
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.sock = socket.create_server((host, 0), family=family, backlog=256)
        self.address: tuple[str, int] = (host, self.sock.getsockname()[1])
        self.thread = threading.Thread(target=self._accept, name="monarch-rdma-server", daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(
                target=self._serve, args=(conn,), name="monarch-rdma-conn", daemon=True
            ).start()

    def _serve(self, conn: socket.socket) -> None:
        tune(conn)
        header = bytearray(REQUEST.size)
        with conn:
            try:
                conn.settimeout(HANDSHAKE_TIMEOUT)
                server_handshake(conn)
            except (OSError, PermissionError) as error:
                log.warning("refused an RDMA data-plane connection: %s", error)
                return
            try:
                while True:
                    conn.settimeout(None)  # an idle pooled connection waits for its next request
                    recv_into_exact(conn, memoryview(header))
                    conn.settimeout(IO_TIMEOUT)
                    self._handle(conn, *REQUEST.unpack(header))
            except (OSError, ConnectionError):
                return  # the reader went away; a partial write leaves only its range touched

    def _handle(
        self, conn: socket.socket, op: int, arg_len: int, buffer_id: int, token: int, offset: int,
        length: int,
    ) -> None:  # fmt: skip
        if arg_len > MAX_ARGS:
            raise ConnectionError("oversized request")
        args: dict[str, Any] = json.loads(recv_exact(conn, arg_len)) if arg_len else {}
        region = self.regions.lookup(buffer_id, token)
        try:
            if op == Op.PING:
                answer(conn, Status.OK, value=len(self.regions.regions))
            elif op == Op.DROP:
                self.regions.drop(buffer_id, token)
                answer(conn, Status.OK)
            elif op in (Op.FETCH_ADD, Op.COMPARE_SWAP):
                if region is None:
                    raise RequestError(Status.DROPPED, dropped_message(buffer_id))
                answer(conn, Status.OK, value=self._atomic(region, op, offset, args))
            else:
                handler = _backends.owner_op(op)
                if handler is None:
                    raise RequestError(
                        Status.BAD_REQUEST, f"unknown RDMA data-plane operation {op}"
                    )
                handler(conn, OwnerRequest(op, buffer_id, offset, length, args, region))
        except RequestError as error:
            answer(conn, error.status, str(error))
        except (OSError, ConnectionError):
            raise
        except Exception as error:  # a backend failed on our side: tell the reader
            log.exception("RDMA data-plane request %d failed", op)
            answer(conn, Status.FAILED, f"{type(error).__name__}: {error}")

    def _atomic(self, region: Region, op: int, offset: int, args: dict[str, Any]) -> int:
        memory = region.memory
        if memory.is_cuda:
            raise RequestError(Status.BAD_REQUEST, "atomics on CUDA memory are not supported")
        if memory.readonly:
            raise RequestError(Status.READONLY, "atomics need a writable buffer")
        check_bounds(region, offset, 8)
        if (memory.addr + offset) % 8:
            raise RequestError(Status.BAD_REQUEST, "atomics need an 8-byte aligned address")
        cell = ctypes.c_uint64.from_address(memory.addr + offset)
        with self.regions.atomic_lock:
            old = int(cell.value)
            if op == Op.FETCH_ADD:
                cell.value = (old + int(args["add"])) & U64
            elif old == int(args["compare"]) & U64:
                cell.value = int(args["swap"]) & U64
        return old


def check_bounds(region: Region, offset: int, length: int) -> None:
    """The owner's own bounds check of a request (``BOUNDS`` answer)."""
    if offset + length > region.memory.nbytes:
        raise RequestError(
            Status.BOUNDS,
            f"{length} bytes at offset {offset} are out of bounds of buffer "
            f"{region.buffer_id} ({region.memory.nbytes} bytes)",
        )


def start(regions: RegionTable) -> DataServer:
    """Start serving ``regions`` on :func:`bind_host`."""
    return DataServer(regions, bind_host())
