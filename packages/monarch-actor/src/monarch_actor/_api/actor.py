"""``Actor`` and the decorators that make its methods reachable: ``endpoint``,
``concurrent_endpoint``; and the checks a class passes before it is spawned."""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, overload

from .._telemetry.spans import instrumented
from .endpoint import ActorEndpoint, Propagator

__all__ = [
    "Actor",
    "EndpointProperty",
    "check_actor_class",
    "concurrent_endpoint",
    "endpoint",
]

P = ParamSpec("P")
R = TypeVar("R")

# names an ActorMesh already has: an endpoint called so would be unreachable
MESH_ATTRIBUTES = frozenset(
    {"slice", "stop", "flatten", "rename", "split", "size", "sizes", "extent", "initialized"}
)


class Actor:
    """Base class of user actors: subclass it and mark methods with ``@endpoint``.

    Records an actor logs with Python's ``logging`` (through ``self.logger``
    or any other logger) start with ``[actor=<the actor>] `` while
    ``monarch_actor.config.prefix_python_logs_with_actor`` is true.
    """

    @functools.cached_property
    def logger(self) -> logging.Logger:
        """A logger named after the actor's class, at level ``DEBUG`` (made on
        first use); it has no handlers of its own: its records go to those of
        the root logger."""
        logger = logging.getLogger(type(self).__name__)
        logger.setLevel(logging.DEBUG)
        return logger


@dataclass(frozen=True, eq=False)
class EndpointProperty(Generic[P, R]):
    """What ``@endpoint`` leaves on the class in place of the method.

    It is typed by the method's parameters ``P`` and result ``R`` (an
    ``async def``'s awaited result), so ``mesh.method.call_one(...)`` is
    checked and typed ``Future[R]``. Not callable on purpose: inside the actor
    an endpoint is reached through a mesh, shared logic belongs in a plain
    method. On an actor mesh, the attribute is the mesh's ``ActorEndpoint``.

    Args:
        method: the decorated method.
        propagate: how ``rref()`` calls learn what the method returns, for
            distributed tensors (monarch-tensor): a function, ``"cached"``,
            ``"inspect"``, ``"mocked"`` or ``None``.
        explicit_response_port: the method takes a ``Port`` first and answers
            through it instead of returning its result.
        concurrent: calls run as concurrent tasks (``@concurrent_endpoint``).
        instrument: ``method`` runs each call inside a telemetry span named
            after it (the decorators wrap it so; its ``__wrapped__`` is the
            user's method).

    Attributes:
        method: what runs for each call: the decorated method, or with
            ``instrument`` a wrapper that runs it inside a span.
        propagate: the ``propagate=`` option given to the decorator.
        explicit_response_port: whether the method answers through a ``Port`` it is given.
        concurrent: whether calls run as concurrent tasks on the actor's loop.
        instrument: whether each call runs inside a telemetry span.
    """

    method: Callable[..., Any]
    propagate: Propagator = None
    explicit_response_port: bool = False
    concurrent: bool = False
    instrument: bool = False

    @property
    def name(self) -> str:
        """The method's name, which is the endpoint's name on a mesh."""
        return self.method.__name__

    @functools.cached_property
    def is_async(self) -> bool:
        """Whether the method is an ``async def`` (asked once)."""
        return inspect.iscoroutinefunction(self.method)

    def bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Check the arguments against the method's signature, before anything is sent.

        Args:
            args: the positional arguments of the call (without ``self`` or a response port).
            kwargs: the keyword arguments of the call.

        Raises:
            TypeError: the arguments do not fit the method's signature.
        """
        if not kwargs:
            fits = self._positional_counts
            if fits is not None and fits[0] <= len(args) <= fits[1]:
                return  # what Signature.bind would accept, without its cost on every call
        leading = (None, None) if self.explicit_response_port else (None,)
        self.signature.bind(*leading, *args, **kwargs)

    @functools.cached_property
    def _positional_counts(self) -> tuple[float, float] | None:
        """The fewest and the most positional arguments a call without
        keywords may pass (after ``self`` and a response port); None when a
        keyword-only parameter has no default, so a call needs keywords."""
        fewest = most = 0.0
        for parameter in self.signature.parameters.values():
            if parameter.kind in (parameter.POSITIONAL_ONLY, parameter.POSITIONAL_OR_KEYWORD):
                most += 1
                if parameter.default is parameter.empty:
                    fewest = most
            elif parameter.kind is parameter.VAR_POSITIONAL:
                most = float("inf")
            elif parameter.kind is parameter.KEYWORD_ONLY and parameter.default is parameter.empty:
                return None
        leading = 2 if self.explicit_response_port else 1
        return fewest - leading, most - leading

    @functools.cached_property
    def signature(self) -> inspect.Signature:
        """The method's signature, including ``self`` (computed once)."""
        return inspect.signature(self.method)

    # On a class the property itself; on an actor mesh (which ``spawn`` types
    # as the actor class) the mesh's endpoint: that is what the type says.
    @overload
    def __get__(self, instance: None, owner: type | None = None) -> EndpointProperty[P, R]: ...
    @overload
    def __get__(self, instance: object, owner: type | None = None) -> ActorEndpoint[P, R]: ...
    def __get__(self, instance: object, owner: type | None = None) -> Any:
        return self


@overload
def endpoint(method: Callable[Concatenate[Any, P], Awaitable[R]]) -> EndpointProperty[P, R]: ...
@overload
def endpoint(method: Callable[Concatenate[Any, P], R]) -> EndpointProperty[P, R]: ...
@overload
def endpoint(
    method: None = None,
    *,
    propagate: Propagator = None,
    explicit_response_port: bool = False,
    instrument: bool = True,
) -> Callable[[Callable[..., Any]], EndpointProperty[..., Any]]: ...
def endpoint(
    method: Callable[..., Any] | None = None,
    *,
    propagate: Propagator = None,
    explicit_response_port: bool = False,
    instrument: bool = True,
) -> Any:
    """Mark an actor method as callable through meshes.

    Use it bare (``@endpoint``) or with options
    (``@endpoint(explicit_response_port=True)``). An actor's endpoints must be
    all ``def`` or all ``async def``.

    Args:
        method: the method, when used bare; ``None`` when options are given.
        propagate: for distributed tensors (monarch-tensor): how ``rref()``
            calls learn what the method returns without running it, a function
            of the arguments' fake tensors or ``"cached"``, ``"inspect"``,
            ``"mocked"``.
        explicit_response_port: the method gets a ``Port`` as its first
            argument (after ``self``) and answers by sending to it; it may
            return before it answers.
        instrument: run each call inside a telemetry span named after the
            method, with the actor's identity as attributes (see
            ``traced``); it costs one check per call until the process has
            a tracer provider.

    Returns:
        The ``EndpointProperty`` that replaces the method; with ``method=None``,
        a decorator that makes one.

    Raises:
        ValueError: the method is already an endpoint.
        TypeError: what is decorated is not callable.
    """

    def wrap(fn: Callable[..., Any]) -> EndpointProperty[..., Any]:
        if isinstance(fn, EndpointProperty):
            raise ValueError(f"{fn.name} is already an endpoint: use one endpoint decorator")
        if not callable(fn):
            raise TypeError(f"@endpoint decorates a method, not {type(fn).__name__}")
        if instrument:
            return EndpointProperty(
                instrumented(fn), propagate, explicit_response_port, instrument=True
            )
        return EndpointProperty(fn, propagate, explicit_response_port)

    return wrap if method is None else wrap(method)


def concurrent_endpoint(
    method: Callable[..., Any] | None = None,
    *,
    propagate: Propagator = None,
    explicit_response_port: bool = False,
    instrument: bool = True,
) -> Any:
    """An ``async def`` endpoint whose calls run as concurrent tasks on the actor's loop.

    The actor moves on to its next message at the body's first ``await``, so
    calls may overlap. Use it bare or with options, as ``endpoint``.

    Args:
        method: the ``async def`` method, when used bare; ``None`` when options are given.
        propagate: as for ``endpoint``: how ``rref()`` calls learn what the
            method returns (distributed tensors).
        explicit_response_port: the method gets a ``Port`` as its first
            argument (after ``self``) and answers by sending to it.
        instrument: run each call inside a telemetry span named after the
            method, as for ``endpoint``.

    Returns:
        The ``EndpointProperty`` that replaces the method; with ``method=None``,
        a decorator that makes one.

    Raises:
        ValueError: the method is not an ``async def``, or is already an endpoint.
    """

    def wrap(fn: Callable[..., Any]) -> EndpointProperty[..., Any]:
        if isinstance(fn, EndpointProperty):
            raise ValueError(
                f"{fn.name}: concurrent_endpoint does not wrap @endpoint; pass the "
                "endpoint options to @concurrent_endpoint instead"
            )
        if not inspect.iscoroutinefunction(fn):
            raise ValueError(
                "concurrent_endpoint can only wrap async endpoints: make "
                f"{getattr(fn, '__qualname__', fn)!r} an async def"
            )
        if instrument:
            fn = instrumented(fn)
        return EndpointProperty(
            fn, propagate, explicit_response_port, concurrent=True, instrument=instrument
        )

    return wrap if method is None else wrap(method)


def endpoints_of(cls: type) -> dict[str, EndpointProperty[..., Any]]:
    found: dict[str, EndpointProperty[..., Any]] = {}
    for klass in reversed(cls.__mro__):
        for name, value in vars(klass).items():
            if isinstance(value, EndpointProperty):
                found[name] = value
            elif name in found:
                del found[name]  # overridden by a plain attribute
    return found


def check_actor_class(cls: object) -> bool:
    """Validate a class for ``spawn``; whether it is an async actor."""
    if not (isinstance(cls, type) and issubclass(cls, Actor)):
        raise ValueError(f"{cls!r} is not an Actor: spawn takes a subclass of monarch.actor.Actor")
    eps = endpoints_of(cls)
    collide = sorted(MESH_ATTRIBUTES & eps.keys())
    if collide:
        raise ValueError(
            f"ActorMesh has an attribute that collides with an endpoint name: {collide[0]!r} "
            f"in {cls.__qualname__}; rename the endpoint"
        )
    kinds = {ep.is_async for ep in eps.values()}
    if kinds == {True, False}:
        sync = sorted(n for n, ep in eps.items() if not ep.is_async)
        asyn = sorted(n for n, ep in eps.items() if ep.is_async)
        raise ValueError(
            f"{cls.__qualname__} mixes both async and sync endpoints (sync: {sync}, async: "
            f"{asyn}); make them all `def` or all `async def`"
        )
    is_async = kinds != {False}  # no endpoints at all: an async actor, as in Monarch
    if not is_async:
        for hook in ("__cleanup__", "__supervise__", "_handle_undeliverable_message"):
            fn = getattr(cls, hook, None)
            if fn is not None and inspect.iscoroutinefunction(fn):
                raise ValueError(
                    f"{cls.__qualname__} is a sync actor (its endpoints are plain defs) but has "
                    f"an async {hook}: make {hook} a plain def, or the endpoints async defs"
                )
    return is_async
