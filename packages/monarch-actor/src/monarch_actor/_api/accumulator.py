"""``Accumulator``: fold the replies of an endpoint's ``stream`` into one value."""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from .._core.future import Future
from .endpoint import ActorEndpoint

__all__ = ["Accumulator"]

R = TypeVar("R")
A = TypeVar("A")


class Accumulator(Generic[R, A]):
    """Fold the replies of every actor of a mesh into one value.

    ``Accumulator(mesh.ep, identity, combine).accumulate(*args)`` gives a
    ``Future`` of ``combine(...combine(identity, r0)..., rN)`` over the replies,
    in the order they arrive.

    Args:
        endpoint: the endpoint of an actor mesh to call (``mesh.method``).
        identity: the starting value of the fold; also the result when the mesh is empty.
        combine: ``combine(acc, reply)`` gives the next accumulated value.

    Raises:
        TypeError: ``endpoint`` is not the endpoint of an actor mesh.
    """

    def __init__(
        self, endpoint: ActorEndpoint[..., R], identity: A, combine: Callable[[A, R], A]
    ) -> None:
        if not isinstance(endpoint, ActorEndpoint):
            raise TypeError(
                f"Accumulator takes an endpoint of an actor mesh, got {type(endpoint).__name__}"
            )
        self._endpoint = endpoint
        self._identity = identity
        self._combine = combine

    def accumulate(self, *args: Any, **kwargs: Any) -> Future[A]:
        """Call every actor of the mesh with these arguments and fold the replies.

        Returns:
            A ``Future`` of the folded value. It fails with the first error a
            reply (or ``combine``) raises.
        """
        replies = list(self._endpoint.stream(*args, **kwargs))
        done: concurrent.futures.Future[A] = concurrent.futures.Future()
        state = {"value": self._identity, "left": len(replies)}
        lock = threading.Lock()

        def fold(reply: Future[R]) -> None:
            with lock:
                if done.done():
                    return
                try:
                    state["value"] = self._combine(state["value"], reply.get())  # type: ignore[arg-type]
                except BaseException as error:
                    done.set_exception(error)
                    return
                state["left"] -= 1  # type: ignore[operator]
                if state["left"] == 0:
                    done.set_result(state["value"])  # type: ignore[arg-type]

        if not replies:
            done.set_result(self._identity)
        for reply in replies:
            reply.add_done_callback(fold)
        return Future._of(done)
