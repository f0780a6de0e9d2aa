"""Endpoints of an actor mesh and their adverbs: ``call_one``, ``call``,
``choose``, ``stream``, ``broadcast``; and ``send``, the primitive under them.

Arguments are checked against the method's signature and pickled on the
caller's thread, so a mistake raises right where it was made; the control
loop then casts the message down the multicast tree and gathers replies.
"""

from __future__ import annotations

import concurrent.futures
import random
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

from monarch_mesh import Shape, Slice
from monarch_transport import DecodeError, decode, encode

from ._actor import EndpointProperty
from ._errors import SupervisionError
from ._future import Future
from ._port import Port
from ._runtime import Frames, Runtime, get_runtime
from ._value_mesh import ValueMesh

if TYPE_CHECKING:
    from ._mesh import ActorMesh

__all__ = ["ActorEndpoint", "send"]

R = TypeVar("R")


class _Gather:
    """Collects the replies of one cast on a port of this process (on the loop)."""

    def __init__(self, runtime: Runtime, count: int, mode: str, shape: Shape) -> None:
        self.runtime = runtime
        self.count = count
        self.mode = mode  # "one", "all" or "stream"
        self.shape = shape
        self.values: dict[int, Any] = {}
        self.addresses: list[str] = []
        self.result: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self.stream: list[concurrent.futures.Future[Any]] = (
            [concurrent.futures.Future() for _ in range(count)] if mode == "stream" else []
        )
        self.pid = 0

    def open(self, addresses: list[str]) -> list[str | int]:
        self.addresses = addresses
        self.pid = self.runtime.open_port(self.deliver, self.lost)
        self.runtime.watch(self.pid, addresses if len(addresses) == 1 else list(set(addresses)))
        return [self.runtime.address, self.pid]

    def deliver(self, header: dict[str, Any], frames: Frames) -> None:
        position = header.get("r", 0)
        if position in self.values:
            return  # a second reply (explicit ports may send twice): the first counts
        try:
            value = decode(frames)[1]
            failed = bool(header.get("x"))
        except DecodeError as error:
            value, failed = error, True
        self._settle(position, value, failed)

    def _settle(self, position: int, value: Any, failed: bool) -> None:
        self.values[position] = value
        if self.mode == "stream":
            waiter = self.stream[len(self.values) - 1]
            if failed:
                waiter.set_exception(value)
            else:
                waiter.set_result(value)
        elif failed and not self.result.done():
            self.result.set_exception(value)
        if len(self.values) == self.count:
            self.runtime.close_port(self.pid)
            if not self.result.done():
                if self.mode == "one":
                    self.result.set_result(self.values[0])
                else:
                    relative = Shape(
                        self.shape.labels, Slice.new_row_major(self.shape.extent.sizes)
                    )
                    ordered = [self.values[i] for i in range(self.count)]
                    self.result.set_result(ValueMesh(relative, ordered))

    def fail(self, error: BaseException) -> None:
        """Every position fails with ``error`` (the target is known to be dead)."""
        for position in range(self.count):
            if position not in self.values:
                self._settle(position, error, True)

    def lost(self, address: str, reason: str) -> None:
        for position, where in enumerate(self.addresses):
            if where == address and position not in self.values:
                self._settle(position, SupervisionError(reason), True)


class ActorEndpoint(Generic[R]):
    """``mesh.method``: the adverbs that message the mesh's actors."""

    def __init__(self, mesh: ActorMesh[Any], prop: EndpointProperty, plain: bool = False) -> None:
        self._mesh = mesh
        self._prop = prop
        self._name = prop.name
        self._plain = plain  # a method without @endpoint, reached through as_endpoint()

    def _message(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Frames:
        self._prop.bind(args, kwargs)
        return encode((args, kwargs))

    def _cast(
        self, shape: Shape, frames: Frames, gather: _Gather | None, port: Port[Any] | None = None
    ) -> None:
        header: dict[str, Any] = {"op": "call", "m": self._name}
        if self._plain:
            header["plain"] = 1
            if self._prop.explicit_response_port:
                header["xp"] = 1
        self._mesh._cast_message(shape, header, frames, gather, port)

    def call_one(self, *args: Any, **kwargs: Any) -> Future[R]:
        size = len(self._mesh._shape)
        if size != 1:
            raise ValueError(f"call_one requires exactly 1 actor, but mesh has {size}")
        return self._gathered("one", self._mesh._shape, args, kwargs)

    def call(self, *args: Any, **kwargs: Any) -> Future[ValueMesh[R]]:
        return self._gathered("all", self._mesh._shape, args, kwargs)

    def choose(self, *args: Any, **kwargs: Any) -> Future[R]:
        shape = self._mesh._shape
        rank = shape.ndslice[random.randrange(len(shape))]
        single = Shape([], Slice(offset=rank, sizes=[], strides=[]))
        return self._gathered("one", single, args, kwargs)

    def stream(self, *args: Any, **kwargs: Any) -> Iterator[Future[R]]:
        frames = self._message(args, kwargs)
        gather = _Gather(get_runtime(), len(self._mesh._shape), "stream", self._mesh._shape)
        self._cast(self._mesh._shape, frames, gather)
        return (Future._of(waiter) for waiter in gather.stream)

    def broadcast(self, *args: Any, **kwargs: Any) -> None:
        self._cast(self._mesh._shape, self._message(args, kwargs), None)

    def _gathered(
        self, mode: str, shape: Shape, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Future[Any]:
        frames = self._message(args, kwargs)
        gather = _Gather(get_runtime(), len(shape), mode, shape)
        self._cast(shape, frames, gather)
        return Future._of(gather.result)

    def rref(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(
            "rref() returns distributed tensors: it needs the monarch-tensor package and an "
            "active proc mesh (`with procs.activate():`), which this installation lacks"
        )

    def __repr__(self) -> str:
        return f"<endpoint {self._mesh._name}.{self._name}>"


def send(
    endpoint: ActorEndpoint[Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    port: Port[Any] | None = None,
    selection: Literal["all", "choose"] = "all",
) -> None:
    """Send one message to each selected actor of ``endpoint``'s mesh; each
    reply goes to ``port`` (dropped when there is none)."""
    if not isinstance(endpoint, ActorEndpoint):
        raise TypeError(f"send() takes an endpoint of an actor mesh, got {type(endpoint).__name__}")
    if selection not in ("all", "choose"):
        raise ValueError(f"selection must be 'all' or 'choose', got {selection!r}")
    shape = endpoint._mesh._shape
    if selection == "choose":
        rank = shape.ndslice[random.randrange(len(shape))]
        shape = Shape([], Slice(offset=rank, sizes=[], strides=[]))
    endpoint._cast(shape, endpoint._message(tuple(args), dict(kwargs)), None, port)
