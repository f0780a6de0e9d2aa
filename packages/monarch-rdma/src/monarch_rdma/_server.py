"""The owner's data-plane server: one listening socket per process, started
on the first registration, with a thread per connection. It runs apart from
the actor runtime: transfers never pass through a mailbox, and the owner's
actors are never invoked or blocked by them.

It listens twice: on TCP (any host; ``tcp_host``), and on a Unix socket in
a folder of its own that only this user may enter (mode 0700), for the
peers of its host. There the kernel names the peer (``SO_PEERCRED``): a
connection from another uid is closed before its handshake, and what a
request does to a process (``ALLOW_ATTACH``, a same-host write the owner
copies in) it does to the process at the other end, whatever the request
says. Both ways authenticate with the job's secret; whether messages are
sealed is decided by the listening address (see ``_wire``).

The server itself serves what every owner must, whatever the backends:
``PING``, ``DROP`` and the 64-bit atomics. Every other operation belongs to
a backend and is found in the registry of backends (``_backends``).

On a sealed connection (``_wire``) a request is received whole, a write's
data into staging memory, and its tag checked before anything of it is
served; one that fails is answered ``INTEGRITY``, logged with the peer's
address, and the connection is closed.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import errno
import json
import logging
import os
import shutil
import socket
import tempfile
import threading
import time
from typing import Any, NoReturn

import monarch_rdma._backends as _backends
from monarch_actor.extension import background_thread, process_address
from monarch_transport import Address, IntegrityError, default_listen_address

from ._backend import ConnectionResources, OwnerRequest
from ._config import get_config
from ._errors import RDMABufferDropped
from ._regions import Region, RegionTable
from ._wire import (
    DATA,
    MAX_ARGS,
    MAX_DATA,
    QUIET,
    REQUEST,
    Channel,
    Op,
    Payload,
    RequestError,
    Status,
    answer,
    dropped_message,
    peer_credentials,
    readonly_message,
    server_handshake,
    staged_view,
    staging,
    tune,
)

__all__ = ["DataServer", "bind_host", "check_bounds", "start"]

log = logging.getLogger("monarch.rdma.server")
HANDSHAKE_TIMEOUT = 10.0  # the whole handshake, however the peer paces its bytes
MAX_UNAUTHENTICATED = 64  # connections still in their handshake; more are closed at once
LINGER = 10.0  # longest the server reads (and drops) what a peer sends after a last answer
IO_TIMEOUT = 120.0  # longest a started transfer may stall before the server gives up on it
U64 = (1 << 64) - 1
_TRANSIENT = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM, errno.ECONNABORTED}


class _BadRequest(Exception):
    """A request the server cannot parse: answered, then the connection closes
    (what follows its header cannot be trusted to be in step)."""


def bind_host() -> str:
    """Where the server listens: configured, else where this process's actor
    runtime listens (a host others already reach us on: a proc on a worker
    listens on that host's address), else loopback."""
    configured = get_config().tcp_host
    if configured:
        return configured
    mine = process_address()
    for address in (Address.parse(mine) if mine else None, default_listen_address()):
        if (
            address is not None
            and address.scheme in ("tcp", "tls")
            and address.host not in ("", "*", "0.0.0.0", "::")
        ):
            return address.host
    return "127.0.0.1"


def _private_socket_path() -> str | None:
    """A path for this process's Unix socket in a new folder only this user
    may enter (``mkdtemp`` makes it mode 0700), removed at exit; None where
    Unix sockets cannot be made."""
    if not hasattr(socket, "AF_UNIX"):
        return None
    try:
        folder = tempfile.mkdtemp(prefix="monarch-rdma-")
    except OSError:
        return None
    creator = os.getpid()

    def remove() -> None:
        if os.getpid() == creator:  # a forked child inherits this hook: not its folder
            shutil.rmtree(folder, ignore_errors=True)

    atexit.register(remove)
    return os.path.join(folder, "data")


class DataServer:
    """The listening sockets and their threads, serving one table of regions.

    A thread serves each connection; at most ``MAX_UNAUTHENTICATED`` of them
    may be in their handshake at once (each bounded by ``HANDSHAKE_TIMEOUT``
    in all), so peers without the secret cannot pile up threads. Only
    authenticated connections, job members, stay longer.

    Attributes:
        address: the TCP address (host, port).
        local: the Unix socket's path ("" when there is none).
    """

    def __init__(self, regions: RegionTable, host: str) -> None:
        self.regions = regions
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.sock = socket.create_server((host, 0), family=family, backlog=256)
        self.address: tuple[str, int] = (host, self.sock.getsockname()[1])
        self.local = ""
        self._lock = threading.Lock()
        self.unauthenticated = 0
        self._saturated = False  # logged once per episode, not once per refused connection
        self.thread = background_thread("monarch-rdma-server", self._accept, self.sock, "tcp", host)
        self.thread.start()
        path = _private_socket_path()
        if path is not None:
            try:
                self.unix: socket.socket | None = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                self.unix.bind(path)
                self.unix.listen(256)
            except OSError as error:  # tcp still serves everything but same-host attach
                log.warning("RDMA data-plane server: no Unix socket (%s)", error)
                self.unix = None
            else:
                self.local = path
                background_thread(
                    "monarch-rdma-server-local", self._accept, self.unix, "ipc", path
                ).start()

    def _accept(self, listener: socket.socket, scheme: str, where: str) -> None:
        while True:
            try:
                conn, peer = listener.accept()
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
                background_thread(
                    "monarch-rdma-conn", self._serve, conn, peer, scheme, where
                ).start()
            except RuntimeError:  # no thread to be had: refuse this one, keep accepting
                self._left_handshake()
                conn.close()
                log.exception("RDMA data-plane server could not start a connection thread")

    def _left_handshake(self) -> None:
        with self._lock:
            self.unauthenticated -= 1

    def _serve(self, conn: socket.socket, peer: Any, scheme: str, address: str) -> None:
        where = _peer_name(peer)
        with conn:
            try:
                tune(conn)
                peer_pid = None
                if scheme == "ipc":
                    peer_pid, uid, _ = peer_credentials(conn)
                    where = f"pid {peer_pid} (Unix socket)"
                    if uid != os.geteuid():  # the folder keeps others out; this, anything else
                        raise PermissionError(f"the peer runs as uid {uid}, not as this user")
                deadline = time.monotonic() + HANDSHAKE_TIMEOUT
                chan = server_handshake(conn, deadline, scheme, address, peer_pid)
            except (OSError, PermissionError) as error:
                log.warning("refused an RDMA data-plane connection from %s: %s", where, error)
                return
            except Exception:  # e.g. a malformed job secret here: never a silent death
                log.exception(
                    "RDMA data-plane handshake with %s failed; closing the connection", where
                )
                return
            finally:
                self._left_handshake()  # the slot is free, whichever way it ended
            resources = ConnectionResources()
            try:
                self._requests(chan, resources)
            except IntegrityError as error:  # before OSError: it is a ConnectionError
                log.warning(
                    "an RDMA data-plane request from %s failed its integrity check (%s); it was "
                    "not served and the connection is closed. Something on the network path "
                    "may be altering traffic",
                    where,
                    error,
                )
                with contextlib.suppress(OSError):
                    answer(chan, Status.INTEGRITY, _integrity_message(where, error))
                    _linger(conn)
            except (OSError, ConnectionError):
                pass  # the reader went away; a partial write leaves only its range touched
            except _BadRequest as error:
                log.warning(
                    "closed an RDMA data-plane connection from %s after a bad request: %s",
                    where,
                    error,
                )
                with contextlib.suppress(OSError):
                    _linger(conn)
            except Exception:  # never a silent death: log it, and serve the others on
                log.exception("RDMA data-plane connection from %s failed; closing it", where)
            finally:
                resources.close()  # what the peer made us create lives no longer than this

    def _requests(self, chan: Channel, resources: ConnectionResources) -> None:
        header = bytearray(REQUEST.size)
        while True:
            if resources.poll_next:
                chan.poll(resources.poll_next)
                resources.poll_next = 0.0
            chan.settimeout(None)  # an idle pooled connection waits for its next request
            chan.receive_into(memoryview(header))
            chan.settimeout(IO_TIMEOUT)
            self._handle(chan, resources, bytes(header))

    @staticmethod
    def _refuse(chan: Channel, op: int, problem: str) -> NoReturn:
        """Answer a malformed request ``BAD_REQUEST`` and raise ``_BadRequest``
        (the connection closes)."""
        message = f"malformed RDMA data-plane request (operation {op}): {problem}"
        answer(chan, Status.BAD_REQUEST, message)
        raise _BadRequest(message)

    def _handle(self, chan: Channel, resources: ConnectionResources, header: bytes) -> None:
        """Receive the rest of one request, check its tag, then serve it."""
        op, flags, arg_len, buffer_id, token, offset, length = REQUEST.unpack(header)
        if arg_len > MAX_ARGS:
            self._refuse(chan, op, f"{arg_len} bytes of arguments (the most is {MAX_ARGS})")
        if flags & ~(DATA | QUIET) or (flags & DATA and flags & QUIET):
            self._refuse(chan, op, f"unknown flags {flags:#x}")
        if flags & DATA and length > MAX_DATA:
            self._refuse(chan, op, f"{length} bytes of data (the most is {MAX_DATA})")
        raw = chan.receive(arg_len)
        buf = None
        data: memoryview | bytes = b""
        payload = None
        try:
            if flags & DATA:
                # Staged whole, sealed or not: nothing of it is used before its tag
                # checks, and the buffer is touched only by a copy (a use ``drop()``
                # waits for), never by a receive that waits on the peer.
                buf = staging.take(length)
                data = staged_view(buf, length)
                chan.receive_into(data)
                payload = Payload(chan, length, data)
            chan.verify([header, raw, data])
            args = self._args(chan, op, raw)
            if flags & QUIET:  # served without an answer: a failure can only close
                with chan.muted() as failures:
                    self._serve_request(chan, resources, op, buffer_id, token, offset, length,
                                        args, payload)  # fmt: skip
                if failures:
                    raise _BadRequest(f"a request that expects no answer failed: {failures[0]}")
            else:
                self._serve_request(chan, resources, op, buffer_id, token, offset, length, args,
                                    payload)  # fmt: skip
        finally:
            if buf is not None:
                staging.give(buf)

    def _args(self, chan: Channel, op: int, raw: bytes) -> dict[str, Any]:
        """The request's JSON arguments; a malformed one is answered with
        ``BAD_REQUEST`` and raises ``_BadRequest`` (the connection closes)."""
        try:
            args = json.loads(raw or b"{}")
        except (UnicodeDecodeError, ValueError) as error:
            self._refuse(chan, op, f"arguments are not JSON ({error})")
        if not isinstance(args, dict):
            self._refuse(chan, op, f"arguments are a JSON {type(args).__name__}, not an object")
        return args

    def _serve_request(
        self, chan: Channel, resources: ConnectionResources, op: int, buffer_id: int,
        token: int, offset: int, length: int, args: dict[str, Any], payload: Payload | None,
    ) -> None:  # fmt: skip
        region = self.regions.lookup(buffer_id, token)
        try:
            if op == Op.PING:
                answer(chan, Status.OK, value=len(self.regions.regions))
            elif op == Op.DROP:
                self.regions.drop(buffer_id, token)
                answer(chan, Status.OK)
            elif op in (Op.FETCH_ADD, Op.COMPARE_SWAP):
                if region is None:
                    raise RequestError(Status.DROPPED, dropped_message(buffer_id))
                answer(chan, Status.OK, value=self._atomic(region, op, offset, args))
            else:
                handler = _backends.owner_op(op)
                if handler is None:
                    raise RequestError(
                        Status.BAD_REQUEST, f"unknown RDMA data-plane operation {op}"
                    )
                request = OwnerRequest(
                    op, buffer_id, offset, length, args, region, resources, payload, chan.peer_pid
                )
                handler(chan, request)
        except RequestError as error:
            _discard(payload)  # the data follows the header regardless: keep in step
            answer(chan, error.status, str(error))
        except RDMABufferDropped as error:  # drop() began while the request was served
            _discard(payload)
            answer(chan, Status.DROPPED, str(error))
        except (OSError, ConnectionError):
            raise
        except Exception as error:  # a backend failed on our side: tell the reader
            log.exception("RDMA data-plane request %d failed (peer %s)", op, chan.peer)
            _discard(payload)
            answer(chan, Status.FAILED, f"{type(error).__name__}: {error}")
        else:
            _discard(payload)  # a request that carried data its operation did not use

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
        with region.touching(), self.regions.atomic_lock:
            old = int(cell.value)
            if op == Op.FETCH_ADD:
                cell.value = (old + int(args["add"])) & U64
            elif old == int(args["compare"]) & U64:
                cell.value = int(args["swap"]) & U64
        return old


def _linger(conn: socket.socket) -> None:
    """Close after a last answer without losing it: stop sending, then read
    and discard (never serve) what the peer still sends, until it closes or
    ``LINGER`` seconds pass. A peer part-way through pipelined requests
    thus finishes sending and reads the answer, where closing at once would
    have it meet a reset instead."""
    conn.shutdown(socket.SHUT_WR)
    deadline = time.monotonic() + LINGER
    scratch = bytearray(1 << 16)
    while (left := deadline - time.monotonic()) > 0:
        conn.settimeout(left)
        if not conn.recv_into(scratch):
            return


def _discard(payload: Payload | None) -> None:
    if payload is not None:
        payload.discard()


def _peer_name(peer: Any) -> str:
    if isinstance(peer, tuple) and len(peer) >= 2:
        host = str(peer[0])
        return f"[{host}]:{peer[1]}" if ":" in host else f"{host}:{peer[1]}"
    return str(peer) or "an unknown peer"


def _integrity_message(where: str, error: BaseException) -> str:
    return (
        f"the owner's RDMA data-plane server refused a request from {where} that failed its "
        f"integrity check ({error}) and closed the connection; nothing of that request was "
        "served. Something on the network path between the two hosts altered, injected, "
        "replayed or dropped traffic (or the writer's memory changed while it was being sent: "
        "keep a write's source unchanged until the transfer completes)"
    )


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
