"""``PortForwarder``: point-to-point TCP port forwarding between two proc
meshes of the same shape, as in Monarch.

Each source process listens on an ``"address:port"``; a connection there is
relayed, over Monarch channels, to ``127.0.0.1:dst_port`` on the destination
process at the same mesh coordinates. Stopping the ``PortForwarder`` actor
stops every forward it started (its relay actors are its children).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Callable
from typing import Any, NamedTuple

from monarch_actor import (
    Actor,
    ActorError,
    Channel,
    Point,
    Port,
    PortReceiver,
    ProcMesh,
    current_rank,
    endpoint,
)

__all__ = ["PortForwarder"]

_HOST = "127.0.0.1"
_READ_SIZE = 64 * 1024
_CLOSE_TIMEOUT = 1.0

_PortSpec = int | Callable[[Point], int]
_AddressSpec = str | Callable[[Point], str]


class _Data(NamedTuple):
    data: bytes


class _Eof(NamedTuple):
    pass


class _Abort(NamedTuple):
    pass


async def _close_writer(writer: asyncio.StreamWriter) -> None:
    writer.close()
    try:
        await asyncio.wait_for(writer.wait_closed(), timeout=_CLOSE_TIMEOUT)
    except (OSError, TimeoutError):
        writer.transport.abort()


def _send_abort(channel: Port[Any]) -> None:
    with contextlib.suppress(RuntimeError):
        channel.send(_Abort())


async def _send_socket(reader: asyncio.StreamReader, channel: Port[Any]) -> None:
    while data := await reader.read(_READ_SIZE):
        channel.send(_Data(data))
    channel.send(_Eof())


async def _receive_channel(
    channel: PortReceiver[Any], writer: asyncio.StreamWriter, received_eof: asyncio.Event
) -> None:
    while True:
        message = await channel.recv()
        if isinstance(message, _Data):
            writer.write(message.data)
            await writer.drain()
        elif isinstance(message, _Eof):
            if not received_eof.is_set():
                if writer.can_write_eof():
                    writer.write_eof()
                    await writer.drain()
                else:
                    writer.close()
                received_eof.set()
        elif isinstance(message, _Abort):
            writer.transport.abort()
            raise ConnectionAbortedError
        else:
            raise RuntimeError("received unexpected port-forward message")


async def _wait_for_eofs(send_task: asyncio.Task[None], received_eof: asyncio.Event) -> None:
    await send_task
    await received_eof.wait()


async def _relay(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    send: Port[Any],
    receive: PortReceiver[Any],
) -> None:
    received_eof = asyncio.Event()
    send_task = asyncio.create_task(_send_socket(reader, send))
    receive_task = asyncio.create_task(_receive_channel(receive, writer, received_eof))
    closed_task = asyncio.create_task(_wait_for_eofs(send_task, received_eof))
    tasks = [send_task, receive_task, closed_task]
    try:
        done, _ = await asyncio.wait(
            (receive_task, closed_task), return_when=asyncio.FIRST_COMPLETED
        )
        await (receive_task if receive_task in done else closed_task)
    except asyncio.CancelledError:
        _send_abort(send)
        writer.transport.abort()
        raise
    except (ActorError, OSError, RuntimeError):
        _send_abort(send)
        writer.transport.abort()
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await _close_writer(writer)


class _Connections:
    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()

    def add(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        send: Port[Any],
        receive: PortReceiver[Any],
    ) -> None:
        task = asyncio.create_task(_relay(reader, writer, send, receive))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.clear()


class _Destination(Actor):
    def __init__(self) -> None:
        self._port: int | None = None
        self._connections = _Connections()

    @endpoint
    async def configure(self, destination_port: _PortSpec) -> None:
        self._port = _resolve_port("dst_port", destination_port, current_rank())

    @endpoint
    async def open(self, send: Port[Any]) -> Port[Any]:
        if self._port is None:
            raise RuntimeError("port forward destination is not configured")
        reader, writer = await asyncio.open_connection(_HOST, self._port)
        try:
            source_send, receive = Channel[Any].open()
            self._connections.add(reader, writer, send, receive)
            return source_send
        except (Exception, asyncio.CancelledError):
            await _close_writer(writer)
            raise

    async def __cleanup__(self, exc: Exception | None) -> None:
        await self._connections.close()


class _Source(Actor):
    def __init__(self) -> None:
        self._destination: Any = None
        self._connections = _Connections()
        self._server: asyncio.AbstractServer | None = None

    @endpoint
    async def start(self, destination: Any, source_address: _AddressSpec) -> None:
        self._destination = destination.slice(**dict(current_rank()))
        host, port = _resolve_address(source_address, current_rank())
        self._server = await asyncio.start_server(self._accept, host, port, reuse_port=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._destination is None:
            await _close_writer(writer)
            return
        try:
            send, receive = Channel[Any].open()
            source_send = await self._destination.open.call_one(send)
            self._connections.add(reader, writer, source_send, receive)
        except (Exception, asyncio.CancelledError):
            await _close_writer(writer)
            raise

    async def __cleanup__(self, exc: Exception | None) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
            await server.wait_closed()
        await self._connections.close()


class PortForwarder(Actor):
    """An actor that owns point-to-point TCP port forwards between proc meshes.

    Spawn one (usually on ``this_proc()``), call ``forward`` for each forward
    wanted, and stop it to close every forward it started.

    Examples:
        ```python
        forwarder = this_proc().spawn("forwarder", PortForwarder)
        # clients' port 9000 reaches port 8000 of the servers' processes
        forwarder.forward.call_one(servers, 8000, clients, "127.0.0.1:9000").get()
        ```
    """

    @endpoint
    async def forward(
        self,
        dst_proc_mesh: ProcMesh,
        dst_port: int | Callable[[Point], int],
        src_proc_mesh: ProcMesh,
        src_address: str | Callable[[Point], str],
    ) -> None:
        """Start a pointwise TCP port forward between two proc meshes of the same shape.

        Each source process listens on the ``"address:port"`` ``src_address``
        gives and relays every connection to ``127.0.0.1:dst_port`` on the
        destination process at the same coordinates. ``dst_port`` and
        ``src_address`` may be functions of that process's ``Point``.

        Args:
            dst_proc_mesh: the processes that can reach the destination service.
            dst_port: the destination service's loopback TCP port, or a function
                of each destination point giving it.
            src_proc_mesh: the processes that expose the forwarded port.
            src_address: ``"address:port"`` each source process listens on, or a
                function of each source point giving it.

        Raises:
            ValueError: the meshes' shapes differ, or a fixed port or address is
                invalid (the caller sees it wrapped in an ``ActorError``).
        """
        if dst_proc_mesh.extent != src_proc_mesh.extent:
            raise ValueError(
                "destination and source process meshes must have the same shape: "
                f"{dst_proc_mesh.extent} != {src_proc_mesh.extent}"
            )
        if not callable(dst_port):
            _validate_port("dst_port", dst_port)
        if not callable(src_address):
            _parse_address(src_address)
        suffix = uuid.uuid4().hex
        source: Any = None
        destination: Any = None
        try:
            source = src_proc_mesh.spawn(f"port_forward_source_{suffix}", _Source)
            destination = dst_proc_mesh.spawn(f"port_forward_destination_{suffix}", _Destination)
            await destination.configure.call(dst_port)
            await source.start.call(destination, src_address)
        except Exception as error:
            stops = [a.stop().as_asyncio() for a in (source, destination) if a is not None]
            failures = [
                r for r in await asyncio.gather(*stops, return_exceptions=True) if r is not None
            ]
            if failures:
                details = "; ".join(f"{type(f).__name__}: {f}" for f in failures)
                error.add_note(f"port-forward setup cleanup failed: {details}")
            raise


def _validate_port(name: str, port: object) -> None:
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise ValueError(f"{name} must be an integer from 1 through 65535")


def _resolve_port(name: str, port: _PortSpec, point: Point) -> int:
    resolved = port(point) if callable(port) else port
    _validate_port(name, resolved)
    return resolved


def _parse_address(address: object) -> tuple[str, int]:
    if not isinstance(address, str):
        raise ValueError("src_address must resolve to a string in 'address:port' form")
    host, separator, port_text = address.rpartition(":")
    if not separator or not host:
        raise ValueError("src_address must use 'address:port' form")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        port = int(port_text)
    except ValueError as error:
        raise ValueError("src_address port must be an integer") from error
    _validate_port("src_address port", port)
    return host, port


def _resolve_address(address: _AddressSpec, point: Point) -> tuple[str, int]:
    return _parse_address(address(point) if callable(address) else address)
