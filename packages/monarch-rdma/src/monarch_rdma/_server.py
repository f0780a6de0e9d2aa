"""The owner's data-plane server: one listening socket per process, started
on the first registration, with a thread per connection. It runs apart from
the actor runtime: transfers never pass through a mailbox, and the owner's
actors are never invoked or blocked by them.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import logging
import socket
import threading
from typing import TYPE_CHECKING, Any

from monarch_transport import default_listen_address

from ._config import get_config
from ._memory import host_view
from ._wire import ANSWER, MAX_ARGS, REQUEST, Op, Status, recv_exact, recv_into_exact
from ._wire import server_handshake as handshake

if TYPE_CHECKING:
    from ._registry import Region, Registry

__all__ = ["DataServer", "start"]

log = logging.getLogger("monarch.rdma.server")
HANDSHAKE_TIMEOUT = 10.0
IO_TIMEOUT = 120.0  # longest a started transfer may stall before the server gives up on it
SOCKET_BUFFER = 4 << 20
DRAIN = 1 << 20
SMALL = 64 << 10


def bind_host() -> str:
    configured = get_config().tcp_host
    if configured:
        return configured
    address = default_listen_address()  # where this process's actor runtime listens
    if address.scheme in ("tcp", "tls") and address.host not in ("", "*"):
        return address.host
    return "127.0.0.1"


def tune(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SOCKET_BUFFER)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SOCKET_BUFFER)


class RequestError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class DataServer:
    def __init__(self, registry: Registry, host: str) -> None:
        self.registry = registry
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
                handshake(conn)
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
        region = self.registry.lookup(buffer_id, token)
        try:
            if op == Op.PING:
                self._answer(conn, Status.OK, value=len(self.registry.regions))
                return
            if op == Op.DROP:
                self.registry.drop(buffer_id, token)
                self._answer(conn, Status.OK)
                return
            if op == Op.WRITE:
                self._write(conn, region, buffer_id, offset, length)
                return
            if region is None:
                raise RequestError(Status.DROPPED, _dropped(buffer_id))
            if op == Op.READ:
                self._read(conn, region, offset, length)
            elif op in (Op.FETCH_ADD, Op.COMPARE_SWAP):
                self._answer(conn, Status.OK, value=self._atomic(region, op, offset, args))
            elif op == Op.IBV_CONNECT:
                from . import _ibverbs

                self._answer_json(conn, _ibverbs.owner_connect(region, args))
            elif op == Op.CUDA_IPC:
                from . import _cuda

                self._answer_json(conn, _cuda.owner_share(region))
            else:
                raise RequestError(Status.BAD_REQUEST, f"unknown RDMA data-plane operation {op}")
        except RequestError as error:
            self._answer(conn, error.status, str(error))
        except (OSError, ConnectionError):
            raise
        except Exception as error:  # a backend failed on our side: tell the reader
            log.exception("RDMA data-plane request %d failed", op)
            self._answer(conn, Status.FAILED, f"{type(error).__name__}: {error}")

    @staticmethod
    def _answer(conn: socket.socket, status: int, message: str = "", value: int = 0) -> None:
        text = message.encode()
        conn.sendall(ANSWER.pack(status, len(text), value) + text)

    def _answer_json(self, conn: socket.socket, payload: dict[str, Any]) -> None:
        text = json.dumps(payload).encode()
        conn.sendall(ANSWER.pack(Status.OK, len(text), 0) + text)

    @staticmethod
    def _check_bounds(region: Region, offset: int, length: int) -> None:
        if offset + length > region.memory.nbytes:
            raise RequestError(
                Status.BOUNDS,
                f"{length} bytes at offset {offset} are out of bounds of buffer "
                f"{region.buffer_id} ({region.memory.nbytes} bytes)",
            )

    def _read(self, conn: socket.socket, region: Region, offset: int, length: int) -> None:
        self._check_bounds(region, offset, length)
        memory = region.memory
        if memory.is_cuda:
            from ._cuda import to_host

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

    def _write(
        self, conn: socket.socket, region: Region | None, buffer_id: int, offset: int, length: int
    ) -> None:
        try:
            if region is None:
                raise RequestError(Status.DROPPED, _dropped(buffer_id))
            if region.memory.readonly:
                raise RequestError(
                    Status.READONLY,
                    f"buffer {buffer_id} was registered from read-only memory; it cannot be "
                    "written",
                )
            self._check_bounds(region, offset, length)
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
            from ._cuda import from_host

            staging = bytearray(length)
            recv_into_exact(conn, memoryview(staging))
            from_host(memory, offset, memoryview(staging))
        else:
            recv_into_exact(conn, host_view(memory.addr + offset, length))
        self._answer(conn, Status.OK)

    def _atomic(self, region: Region, op: int, offset: int, args: dict[str, Any]) -> int:
        if region.memory.is_cuda:
            raise RequestError(Status.BAD_REQUEST, "atomics on CUDA memory are not supported")
        if region.memory.readonly:
            raise RequestError(Status.READONLY, "atomics need a writable buffer")
        self._check_bounds(region, offset, 8)
        if (region.memory.addr + offset) % 8:
            raise RequestError(Status.BAD_REQUEST, "atomics need an 8-byte aligned address")
        cell = ctypes.c_uint64.from_address(region.memory.addr + offset)
        mask = (1 << 64) - 1
        with self.registry.atomic_lock:
            old = int(cell.value)
            if op == Op.FETCH_ADD:
                cell.value = (old + int(args["add"])) & mask
            elif old == int(args["compare"]) & mask:
                cell.value = int(args["swap"]) & mask
        return old


def _dropped(buffer_id: int) -> str:
    return (
        f"buffer {buffer_id} is not registered at its owner: it was dropped (RDMABuffer.drop()) "
        "or its owner restarted"
    )


def start(registry: Registry) -> DataServer:
    return DataServer(registry, bind_host())
