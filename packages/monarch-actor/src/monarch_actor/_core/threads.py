"""Work on a thread of its own, with a future of its outcome: the one way the
runtime runs a blocking call (a stop that waits for processes, a worker
loop, an attach that waits for an address) without blocking its caller."""

from __future__ import annotations

import concurrent.futures
import signal
import threading
from collections.abc import Callable
from typing import ParamSpec, TypeVar

__all__ = [
    "background_thread",
    "leave_ctrl_c_to_the_main_thread",
    "run_in_thread",
    "take_ctrl_c_too",
]

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

    background_thread(name, run).start()
    return done


def background_thread(
    name: str, fn: Callable[P, object], /, *args: P.args, **kwargs: P.kwargs
) -> threading.Thread:
    """A daemon thread that runs ``fn(*args, **kwargs)`` with Ctrl-C left to
    the main thread: the way a package's servers, samplers and watchers run
    beside the user's script. Python raises ``KeyboardInterrupt`` in the main
    thread only, and a signal the kernel gives another thread does not wake
    a main thread asleep in ``time.sleep`` or blocked in a lock.

    Args:
        name: the thread's name (``monarch-...``: it shows in stack dumps).
        fn: what the thread runs.
        *args: positional arguments for ``fn``.
        **kwargs: keyword arguments for ``fn``.

    Returns:
        The thread, not started yet.

    Examples:
        >>> from monarch_actor.extension import background_thread
        >>> thread = background_thread("monarch-example", print, "hello")
        >>> thread.start(); thread.join()
        hello
    """

    def run() -> None:
        leave_ctrl_c_to_the_main_thread()
        fn(*args, **kwargs)

    return threading.Thread(target=run, name=name, daemon=True)


def leave_ctrl_c_to_the_main_thread() -> None:
    """Block SIGINT in the calling thread (one of the runtime's own) and in
    the threads it starts. Python raises KeyboardInterrupt in the main thread
    only, and a main thread blocked in a lock (``Future.get``) or a sleep wakes
    only if the signal is delivered to it: delivered to another thread, Ctrl-C
    did nothing until the wait ended (seen in about 1 of 8 tries)."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})


def take_ctrl_c_too() -> None:
    """Undo ``leave_ctrl_c_to_the_main_thread`` in a thread that runs the
    user's code (an actor's), whose child processes would inherit the block."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
