"""Endpoints of an actor mesh and their adverbs: ``call_one``, ``call``,
``choose``, ``stream``, ``broadcast``; and ``send``, the primitive under them.

Arguments are checked against the method's signature and pickled on the
caller's thread, so a mistake raises right where it was made; the control
loop then casts the message down the multicast tree and gathers replies.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable, Iterator
from typing import Any, Generic, Literal, ParamSpec, Protocol, TypeVar

from monarch_mesh import Shape, Slice
from monarch_transport import encode

from .._core import extensions
from .._core.future import Future
from .._core.gather import Gather
from .._core.ports import Port
from .._core.process import get_runtime
from .._core.router import Frames
from .._core.wire import Key, Op
from .._procs.table import ProcTable
from .._supervision.supervise import Supervision, actor_name
from .._supervision.wording import actor_failed, call_failed
from .value_mesh import ValueMesh

__all__ = ["ActorEndpoint", "Declared", "Messaged", "Propagator", "send"]

P = ParamSpec("P")
R = TypeVar("R")


# how rref() calls learn what an endpoint's method returns (``@endpoint(propagate=...)``)
Propagator = Callable[..., Any] | Literal["cached", "inspect", "mocked"] | None


class Declared(Protocol):
    """What an endpoint needs of its method's declaration (``EndpointProperty``,
    which ``@endpoint`` leaves on the class, defined above this module, is
    one): its name, how it answers, how rref() learns its results, and the
    check of a call's arguments."""

    @property
    def name(self) -> str: ...

    @property
    def explicit_response_port(self) -> bool: ...

    @property
    def propagate(self) -> Propagator: ...

    def bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None: ...


class _Spawned(Protocol):
    """The proc mesh an actor mesh was spawned on, as its endpoints see it."""

    @property
    def _shape(self) -> Shape: ...

    @property
    def _table(self) -> ProcTable: ...


class Messaged(Protocol):
    """What an endpoint needs of the actor mesh it messages (``ActorMesh``,
    which is defined above this module, is one): its actors' key and spawn
    name, the proc mesh they were spawned on, the slice it covers, and
    how a message is cast to it."""

    @property
    def _key(self) -> str: ...

    @property
    def _spawn_name(self) -> str: ...

    @property
    def _procs(self) -> _Spawned: ...

    @property
    def _shape(self) -> Shape: ...

    def _cast_message(
        self,
        shape: Shape,
        header: dict[str, Any],
        frames: Frames,
        gather: Gather | None,
        port: Port[Any] | None,
    ) -> None: ...


_NO_ARGUMENTS = encode(((), {}))  # a call with no arguments


class ActorEndpoint(Generic[P, R]):
    """``mesh.method``: the adverbs that message the mesh's actors.

    Typed by the method's parameters ``P`` and result ``R``. Every adverb checks
    its arguments against the method's signature and pickles them on the
    calling thread, so a ``TypeError`` or a pickling error is raised by the
    call itself. Calls to actors known to have failed fail with
    ``SupervisionError``.

    Made by the mesh (``mesh.method``) or by ``as_endpoint``, not by user code.

    Args:
        mesh: the actor mesh (or slice) the adverbs message.
        prop: the ``EndpointProperty`` of the method.
        plain: the method is not marked ``@endpoint`` (see ``as_endpoint``).
    """

    def __init__(self, mesh: Messaged, prop: Declared, plain: bool = False) -> None:
        self._mesh = mesh
        self._prop = prop
        self._name = prop.name
        self._plain = plain  # a method without @endpoint, reached through as_endpoint()

    def _message(self, args: tuple[Any, ...], kwargs: dict[str, Any], shape: Shape) -> Frames:
        self._prop.bind(args, kwargs)
        if extensions._transforms:
            args, kwargs = extensions.transformed(self._mesh, args, kwargs)
        elif not args and not kwargs:
            return [*_NO_ARGUMENTS]  # the same bytes every time: pickled once
        return encode((args, kwargs), same_host=lambda: self._one_peer_here(shape))

    def _one_peer_here(self, shape: Shape) -> bool:
        """Whether a call on ``shape`` goes to one actor, in another process of
        this host: its CUDA tensor arguments may then travel by CUDA IPC. Each
        IPC handle is opened once, so a message for several actors is staged;
        so is one whose process has not started yet (its address is unknown)."""
        if len(shape) != 1:
            return False
        addresses = self._mesh._procs._table.addresses
        rank = shape.ndslice[0]
        address = addresses[rank] if 0 <= rank < len(addresses) else None
        return bool(address) and get_runtime().same_host_peer(address)  # type: ignore[arg-type]

    def _cast(
        self,
        shape: Shape,
        frames: Frames,
        gather: Gather | None,
        port: Port[Any] | None = None,
        keep: Any = None,
    ) -> None:
        header: dict[str, Any] = {Key.OP: Op.CALL, Key.METHOD: self._name}
        if keep is not None:
            header[Key.KEEP] = keep
        if self._plain:
            header[Key.PLAIN] = 1
            if self._prop.explicit_response_port:
                header[Key.EXPLICIT_PORT] = 1
        self._mesh._cast_message(shape, header, frames, gather, port)

    def call_one(self, *args: P.args, **kwargs: P.kwargs) -> Future[R]:
        """Call the only actor of a one-actor mesh.

        Returns:
            A ``Future`` of the actor's reply; it raises what the endpoint raised.

        Raises:
            ValueError: the mesh does not have exactly one actor.
        """
        size = len(self._mesh._shape)
        if size != 1:
            raise ValueError(f"call_one requires exactly 1 actor, but mesh has {size}")
        return self._gathered("one", self._mesh._shape, args, kwargs)

    def call(self, *args: P.args, **kwargs: P.kwargs) -> Future[ValueMesh[R]]:
        """Call every actor of the mesh and gather their replies.

        Returns:
            A ``Future`` of a ``ValueMesh`` of the replies, with the mesh's
            extent; it fails with the first error an actor raised.
        """
        return self._gathered("all", self._mesh._shape, args, kwargs)

    def choose(self, *args: P.args, **kwargs: P.kwargs) -> Future[R]:
        """Call one actor of the mesh, picked at random.

        Returns:
            A ``Future`` of that actor's reply.
        """
        shape = self._mesh._shape
        rank = shape.ndslice[random.randrange(len(shape))]
        single = Shape([], Slice(offset=rank, sizes=[], strides=[]))
        return self._gathered("one", single, args, kwargs)

    def stream(self, *args: P.args, **kwargs: P.kwargs) -> Iterator[Future[R]]:
        """Call every actor of the mesh and take the replies as they arrive.

        Returns:
            One ``Future`` per actor: the first completes with the first reply
            to arrive, the second with the next, and so on. A failed reply
            fails its future only.
        """
        shape = self._mesh._shape
        frames = self._message(args, kwargs, shape)
        gather = Gather(get_runtime(), len(shape), "stream", describe=self._describe(shape))
        self._cast(self._mesh._shape, frames, gather)
        return (Future._of(waiter) for waiter in gather.stream)

    def broadcast(self, *args: P.args, **kwargs: P.kwargs) -> None:
        """Send the call to every actor of the mesh without waiting for replies.

        An actor whose endpoint raises then fails, and its owner hears of it.

        Raises:
            SupervisionError: the mesh's actors are known to have failed or stopped.
            RuntimeError: the spawn of this mesh was refused.
        """
        shape = self._mesh._shape
        self._cast(shape, self._message(args, kwargs, shape), None)

    def _gathered(
        self, mode: str, shape: Shape, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Future[Any]:
        frames = self._message(args, kwargs, shape)
        finish = list if mode == "one" else _value_mesh_over(shape)  # one reply needs no mesh
        gather = Gather(get_runtime(), len(shape), mode, finish, self._describe(shape))
        self._cast(shape, frames, gather)
        return Future._of(gather.result)

    def _describe(self, shape: Shape) -> Callable[[int, str], str]:
        """The error of position i of a call on ``shape`` whose process was
        lost (worked out only then: most calls never need it)."""
        return functools.partial(self._lost_text, shape)

    def _lost_text(self, shape: Shape, position: int, reason: str) -> str:
        spawned_on = self._mesh._procs._shape  # ranks are named in the whole mesh
        owned = Supervision.of(get_runtime()).owned.get(self._mesh._key)
        owner = owned.owner if owned is not None else None
        rank = list(spawned_on.ndslice).index(shape.ndslice[position])
        actor = actor_name(self._mesh, rank, owner)
        return call_failed(self._mesh._spawn_name, self._name, actor_failed(actor, reason))

    def rref(self, *args: Any, **kwargs: Any) -> Any:
        """Call every actor of the mesh for distributed tensors, without
        waiting: each actor's result stays on its process as its shard (needs
        ``@endpoint(propagate=...)``, the monarch-tensor package and an active
        proc mesh)."""
        hook = extensions.extension("rref")
        assert hook is not None
        return hook(self, args, kwargs)

    def _keep(self, args: tuple[Any, ...], kwargs: dict[str, Any], keep: Any) -> None:
        """Call every actor; each result is handed to the receiving process's
        ``keep`` extension with ``keep`` instead of being answered."""
        shape = self._mesh._shape
        self._cast(shape, self._message(args, kwargs, shape), None, keep=keep)

    @property
    def propagate(self) -> Propagator:
        """The endpoint's ``propagate=`` (how rref() learns its results' shapes)."""
        return self._prop.propagate

    def __repr__(self) -> str:
        return f"<endpoint {self._mesh._spawn_name}.{self._name}>"


def send(
    endpoint: ActorEndpoint[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    port: Port[Any] | None = None,
    selection: Literal["all", "choose"] = "all",
) -> None:
    """Send one message to each selected actor of ``endpoint``'s mesh.

    The primitive under the adverbs: nothing is gathered, each actor's reply
    goes to ``port``.

    Args:
        endpoint: the endpoint of an actor mesh (``mesh.method``), or a
            remote function under an active mesh (``monarch.remote``).
        args: the positional arguments of the call.
        kwargs: the keyword arguments of the call.
        port: where each reply is sent; with ``None`` replies are dropped.
        selection: ``"all"`` for every actor of the mesh, ``"choose"`` for one
            picked at random.

    Raises:
        TypeError: ``endpoint`` is not an actor mesh's endpoint, or the
            arguments do not fit the method's signature.
        ValueError: ``selection`` is neither ``"all"`` nor ``"choose"``.
    """
    if not isinstance(endpoint, ActorEndpoint):
        # what stands for an endpoint (a remote function under an active mesh) names it
        target = getattr(endpoint, "_send_target", None)
        if target is None:
            raise TypeError(
                f"send() takes an endpoint of an actor mesh, got {type(endpoint).__name__}"
            )
        endpoint, args, kwargs = target(tuple(args), dict(kwargs))
    if selection not in ("all", "choose"):
        raise ValueError(f"selection must be 'all' or 'choose', got {selection!r}")
    shape = endpoint._mesh._shape
    if selection == "choose":
        rank = shape.ndslice[random.randrange(len(shape))]
        shape = Shape([], Slice(offset=rank, sizes=[], strides=[]))
    endpoint._cast(shape, endpoint._message(tuple(args), dict(kwargs), shape), None, port)


def _value_mesh_over(shape: Shape) -> Any:
    """How the replies to a call on ``shape`` become a ``ValueMesh`` of the
    same extent (its ranks relative to the call's mesh)."""
    return functools.partial(ValueMesh._row_major, _row_major_over(shape))


@functools.lru_cache(maxsize=256)
def _row_major_over(shape: Shape) -> Shape:
    """``shape``'s labels and sizes over ranks 0 to n-1 (kept: a mesh is
    called with the same shape again and again)."""
    return shape.extent.region
