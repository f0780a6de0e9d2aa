"""The package's worker threads: transfers that do not run in the caller,
and the pieces of one transfer run on several threads at once.

A large same-host copy is bound by the per-page work of one core, not by
memory bandwidth; split across threads (``process_vm_readv``, ``memmove``
and socket calls all run without the GIL) it uses every core. The calling
thread always works too, so a transfer starts without waiting for a
hand-off. A thread never waits for a job that has not started: it takes
such a job back and runs it itself, so transfers that wait for their pieces
on the same workers cannot deadlock, however many there are.
"""

from __future__ import annotations

import concurrent.futures
import os
import threading
from collections.abc import Callable, Sequence

__all__ = ["copy_in_pieces", "run_all", "workers"]

MAX_WORKERS = 32

_lock = threading.Lock()
_workers: concurrent.futures.ThreadPoolExecutor | None = None


def workers() -> concurrent.futures.ThreadPoolExecutor:
    """The worker threads of this process (started on first use)."""
    global _workers
    if _workers is None:
        with _lock:
            if _workers is None:
                _workers = concurrent.futures.ThreadPoolExecutor(
                    max_workers=MAX_WORKERS, thread_name_prefix="monarch-rdma"
                )
    return _workers


def run_all(jobs: Sequence[Callable[[], None]]) -> None:
    """Run every job, the first in this thread and the others on worker
    threads (or here, if no worker has started them by the time this thread
    is free); return when all are done, raising the first failure in job
    order."""
    others = [workers().submit(job) for job in jobs[1:]]
    errors: list[BaseException | None] = [None] * len(jobs)

    def run_here(index: int) -> None:
        try:
            jobs[index]()
        except BaseException as error:
            errors[index] = error

    if jobs:
        run_here(0)
    for index, future in enumerate(others, 1):
        if future.cancel():  # no worker has started it: run it here
            run_here(index)
    for index, future in enumerate(others, 1):
        if not future.cancelled():
            errors[index] = future.exception()  # started: wait for it
    for error in errors:
        if error is not None:
            raise error


def copy_in_pieces(
    nbytes: int, move: Callable[[int, int], None], threads: int, min_piece: int
) -> None:
    """``move(offset, length)`` over ``[0, nbytes)`` on ``threads`` threads
    (this one included). Each thread takes the next piece when done with its
    last: a thread that starts late, or shares its core with another
    process, simply does less. Pieces shrink as the work runs out (a share
    of what is left, at least ``min_piece``), so the threads finish
    together. The first failure stops the others after their current piece
    and is raised."""
    threads = max(1, min(threads, nbytes // max(1, min_piece)))
    if threads == 1:
        move(0, nbytes)
        return
    lock = threading.Lock()
    cursor = [0]
    failed: list[BaseException] = []

    def take() -> tuple[int, int]:
        with lock:
            start = cursor[0]
            left = nbytes - start
            length = min(left, max(min_piece, left // (2 * threads)))
            cursor[0] = start + length
        return start, length

    def work() -> None:
        while not failed:
            start, length = take()
            if not length:
                return
            try:
                move(start, length)
            except BaseException as error:
                failed.append(error)

    helpers = [workers().submit(work) for _ in range(threads - 1)]
    work()
    # A helper that has not started by now finds nothing left: cancel it
    # rather than wait for its thread to wake; wait for those still copying.
    concurrent.futures.wait([helper for helper in helpers if not helper.cancel()])
    if failed:
        raise failed[0]


def _after_fork() -> None:
    global _workers
    _workers = None  # the parent's threads do not exist in a forked child


os.register_at_fork(after_in_child=_after_fork)
