"""Work on a thread of its own, with a future of its outcome: the one way the
runtime runs a blocking call (a stop that waits for processes, a worker
loop, an attach that waits for an address) without blocking its caller."""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable
from typing import ParamSpec, TypeVar

__all__ = ["run_in_thread"]

P = ParamSpec("P")
R = TypeVar("R")


def run_in_thread(
    name: str, fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs
) -> concurrent.futures.Future[R]:
    """Call ``fn(*args, **kwargs)`` on a new daemon thread named ``name``.

    Args:
        name: the thread's name (``monarch-...``: it shows in stack dumps).
        fn: what to run; its result or the exception it raises (any
            ``BaseException``) becomes the future's.

    Returns:
        A future that resolves when ``fn`` returns or raises.

    Examples:
        >>> from monarch_actor._core.threads import run_in_thread
        >>> run_in_thread("monarch-example", sum, [1, 2, 3]).result(timeout=5)
        6
    """
    done: concurrent.futures.Future[R] = concurrent.futures.Future()

    def run() -> None:
        try:
            result = fn(*args, **kwargs)
        except BaseException as error:
            done.set_exception(error)
        else:
            done.set_result(result)

    threading.Thread(target=run, name=name, daemon=True).start()
    return done
