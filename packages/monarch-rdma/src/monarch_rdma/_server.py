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
import errno
import json
import logging
import socket
import threading
import time
from typing import Any

import monarch_rdma._backends as _backends
from monarch_transport import default_listen_address

from ._backend import ConnectionResources, OwnerRequest
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
    readonly_message,
    recv_exact,
    recv_into_exact,
    server_handshake,
    tune,
)

__all__ = ["DataServer", "bind_host", "check_bounds", "start"]

log = logging.getLogger("monarch.rdma.server")
HANDSHAKE_TIMEOUT = 10.0  # the whole handshake, however the peer paces its bytes
MAX_UNAUTHENTICATED = 64  # connections still in their handshake; more are closed at once
IO_TIMEOUT = 120.0  # longest a started transfer may stall before the server gives up on it
U64 = (1 << 64) - 1
_TRANSIENT = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM, errno.ECONNABORTED}


class _BadRequest(Exception):
    """A request the server cannot parse: answered, then the connection closes
    (what follows its header cannot be trusted to be in step)."""


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
    """The listening socket and its threads, serving one table of regions.

    A thread serves each connection; at most ``MAX_UNAUTHENTICATED`` of them
    may be in their handshake at once (each bounded by ``HANDSHAKE_TIMEOUT``
    in all), so peers without the secret cannot pile up threads. Only
    authenticated connections, job members, stay longer."""

    def __init__(self, regions: RegionTable, host: str) -> None:
        self.regions = regions
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.sock = socket.create_server((host, 0), family=family, backlog=256)
        self.address: tuple[str, int] = (host, self.sock.getsockname()[1])
        self._lock = threading.Lock()
        self.unauthenticated = 0
        self._saturated = False  # logged once per episode, not once per refused connection
        self.thread = threading.Thread(target=self._accept, name="monarch-rdma-server", daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, peer = self.sock.accept()
            except OSError as error:
                if error.errno not in _TRANSIENT:
                    return  # the listening socket was closed
                log.warning("RDMA data-plane server cannot accept now: %s", error)
                time.sleep(0.1)  # out of descriptors or memory: wait for some to be freed
                continue
            with self._lock:
                admitted = self.unauthenticated < MAX_UNAUTHENTICATED
                if admitted:
                    self.unauthenticated += 1
                    self._saturated = False
                first_refusal = not admitted and not self._saturated
                self._saturated = not admitted
            if not admitted:
                if first_refusal:
                    log.warning(
                        "RDMA data-plane server: %d connections are already in their handshake; "
                        "closing new ones (from %s) until some finish",
                        MAX_UNAUTHENTICATED,
                        peer,
                    )
                conn.close()
                continue
            try:
                threading.Thread(
                    target=self._serve, args=(conn,), name="monarch-rdma-conn", daemon=True
                ).start()
            except RuntimeError:  # no thread to be had: refuse this one, keep accepting
                self._left_handshake()
                conn.close()
                log.exception("RDMA data-plane server could not start a connection thread")

    def _left_handshake(self) -> None:
        with self._lock:
            self.unauthenticated -= 1

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            try:
                tune(conn)
                server_handshake(conn, time.monotonic() + HANDSHAKE_TIMEOUT)
            except (OSError, PermissionError) as error:
                log.warning("refused an RDMA data-plane connection: %s", error)
                return
            except Exception:  # e.g. a malformed job secret here: never a silent death
                log.exception("RDMA data-plane handshake failed; closing the connection")
                return
            finally:
                self._left_handshake()  # the slot is free, whichever way it ended
            resources = ConnectionResources()
            try:
                self._requests(conn, resources)
            except (OSError, ConnectionError):
                pass  # the reader went away; a partial write leaves only its range touched
            except _BadRequest as error:
                log.warning("closed an RDMA data-plane connection after a bad request: %s", error)
            except Exception:  # never a silent death: log it, and serve the others on
                log.exception("RDMA data-plane connection failed; closing it")
            finally:
                resources.close()  # what the peer made us create lives no longer than this

    def _requests(self, conn: socket.socket, resources: ConnectionResources) -> None:
        header = bytearray(REQUEST.size)
        while True:
            conn.settimeout(None)  # an idle pooled connection waits for its next request
            recv_into_exact(conn, memoryview(header))
            conn.settimeout(IO_TIMEOUT)
            self._handle(conn, resources, *REQUEST.unpack(header))

    @staticmethod
    def _args(conn: socket.socket, op: int, arg_len: int) -> dict[str, Any]:
        """The request's JSON arguments; a malformed one is answered with
        ``BAD_REQUEST`` and raises ``_BadRequest`` (the connection closes)."""
        if arg_len > MAX_ARGS:
            problem = f"{arg_len} bytes of arguments (the most is {MAX_ARGS})"
        else:
            raw = recv_exact(conn, arg_len) if arg_len else b"{}"
            try:
                args = json.loads(raw)
            except (UnicodeDecodeError, ValueError) as error:
                problem = f"arguments are not JSON ({error})"
            else:
                if isinstance(args, dict):
                    return args
                problem = f"arguments are a JSON {type(args).__name__}, not an object"
        message = f"malformed RDMA data-plane request (operation {op}): {problem}"
        answer(conn, Status.BAD_REQUEST, message)
        raise _BadRequest(message)

    def _handle(
        self, conn: socket.socket, resources: ConnectionResources, op: int, arg_len: int,
        buffer_id: int, token: int, offset: int, length: int,
    ) -> None:  # fmt: skip
        args = self._args(conn, op, arg_len)
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
                request = OwnerRequest(op, buffer_id, offset, length, args, region, resources)
                handler(conn, request)
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
            raise RequestError(Status.READONLY, readonly_message(region.buffer_id))
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
