"""``context()``: the running actor and the message it is handling."""

from __future__ import annotations

from typing import Any, Protocol

from monarch_mesh import Extent, Point

from .._core.current import current
from .._core.process import get_runtime
from .creator import CreatorInstance
from .mesh import ProcMesh, this_proc

__all__ = [
    "ActorRunner",
    "Context",
    "Instance",
    "context",
    "current_actor_name",
    "current_rank",
    "current_size",
]

EMPTY_POINT = Point(0, Extent([], []))


class ActorRunner(Protocol):
    """What an ``Instance`` needs of what runs its actor (``actor_host.ActorHost``,
    which imports this module: named here by its shape only)."""

    key: str  # the key of the actor's mesh

    def request_stop(self, reason: str) -> None:
        """Stop the actor after the current message, without a failure."""

    def request_abort(self, reason: str) -> None:
        """Stop the actor after the current message, with a failure."""


class Instance:
    """The actor that is running (the root client on the controller).

    Made by the runtime, not by user code: reach it as ``context().actor_instance``.

    Args:
        name: the name of the actor's mesh, as given to ``spawn``.
        class_name: the actor's class, as ``module.QualifiedName``.
        rank: the actor's point in its actor mesh.
        proc_mesh: the proc mesh it was spawned on; ``None`` for the root client.
        actor_id: the actor's id, ``name@process-address``.
        creator: who spawned it (``None`` for the root client).
        host: the runtime's handle on the running actor; ``None`` for the root client.

    Attributes:
        name: the name of the actor's mesh, as given to ``spawn`` (``"root"`` for the
            root client).
        class_name: the actor's class, as ``module.QualifiedName``.
        rank: the actor's point in its actor mesh.
        actor_id: the actor's id, ``name@process-address``.
        creator: who spawned it: a ``CreatorInstance`` (``name``, ``class_name``,
            ``rank``, and its own ``creator``); ``None`` for the root client.
    """

    def __init__(
        self,
        name: str,
        class_name: str,
        rank: Point,
        proc_mesh: ProcMesh | None,
        actor_id: str,
        creator: CreatorInstance | None,
        host: ActorRunner | None = None,
    ) -> None:
        self.name = name
        self.class_name = class_name
        self.rank = rank
        self._proc_mesh = proc_mesh
        self.actor_id = actor_id
        self.creator = creator
        self._host = host
        self._span_attributes: Any = None  # its identity on spans (telemetry makes it once)

    @property
    def proc_mesh(self) -> ProcMesh:
        """The whole proc mesh the actor was spawned on (``this_proc()`` for the root client)."""
        if self._proc_mesh is None:
            return this_proc()
        return self._proc_mesh

    @property
    def proc(self) -> ProcMesh:
        """The one-process mesh of the process this actor lives in."""
        if self._proc_mesh is None:
            return self.proc_mesh
        return self._proc_mesh.slice(**dict(self.rank))

    @property
    def proc_id(self) -> str:
        """The id of the actor's process: its address."""
        return self.actor_id.partition("@")[2] or self.actor_id

    def stop(self, reason: str | None = None) -> None:
        """Stop this actor after the current message, without a failure.

        Args:
            reason: why it stops (``None``: "stopped by the actor itself").

        Raises:
            RuntimeError: called on the root client.
        """
        if self._host is None:
            raise RuntimeError("the root client cannot stop itself; let the script end")
        self._host.request_stop(reason or "stopped by the actor itself")

    def abort(self, reason: str | None = None) -> None:
        """Stop this actor after the current message, with a failure its owner hears of.

        Args:
            reason: the failure's message (``None``: "no reason provided", as in Monarch).

        Raises:
            RuntimeError: called on the root client.
        """
        if self._host is None:
            raise RuntimeError("the root client cannot abort itself; raise an exception instead")
        self._host.request_abort(reason or "no reason provided")

    kill = abort
    """The same as ``abort``."""

    def as_creator(self) -> CreatorInstance:
        """What the actors this one spawns see as their ``creator``."""
        class_name = None if self._host is None else self.class_name
        return CreatorInstance(self.name, class_name, self.rank, self.creator)

    def __repr__(self) -> str:
        return repr(self.as_creator())


class Context:
    """What ``context()`` returns: ``actor_instance`` and ``message_rank``.

    Made by the runtime for each message; user code gets it from ``context()``.

    Args:
        actor_instance: the running actor.
        message_rank: the actor's point in the mesh the message was sent to,
            when known up front.
        header: the message's header, from which ``message_rank`` is worked out
            on first use when it is not given.

    Attributes:
        actor_instance: the running actor (the root client on the controller).
    """

    __slots__ = ("_header", "_rank", "actor_instance")

    def __init__(
        self,
        actor_instance: Instance,
        message_rank: Point | None = None,
        header: dict[str, Any] | None = None,
    ) -> None:
        self.actor_instance = actor_instance
        self._rank = message_rank
        self._header = header  # the message's header: its rank is worked out when asked

    @property
    def actor_key(self) -> str | None:
        """The key of the running actor's mesh (``None`` for the root client)."""
        host = self.actor_instance._host
        return host.key if host is not None else None

    @property
    def message_rank(self) -> Point:
        """Where this actor is within the mesh (or slice) the current message was sent to."""
        if self._rank is None:
            labels, _offset, sizes, _strides = self._header["s"]  # type: ignore[index]
            self._rank = Point(self._header["b"][0], Extent(labels, sizes))  # type: ignore[index]
        return self._rank


_root: Context | None = None


def context() -> Context:
    """The running actor and its current message; on the controller, the root client."""
    ctx: Context | None = current()
    if ctx is not None:
        return ctx
    global _root
    if _root is None:
        runtime = get_runtime()
        _root = Context(
            Instance("root", "root", EMPTY_POINT, None, f"root@{runtime.address}", None),
            EMPTY_POINT,
        )
    return _root


def current_rank() -> Point:
    """Where this actor is within the mesh the current message was sent to."""
    return context().message_rank


def current_size() -> dict[str, int]:
    """The sizes of the dimensions of the mesh the current message was sent to."""
    return dict(context().message_rank.extent)


def current_actor_name() -> str:
    """The running actor's id, ``name@process-address`` (``root@...`` on the controller)."""
    return str(context().actor_instance.actor_id)
