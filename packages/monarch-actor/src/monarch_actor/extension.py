"""The small public surface sibling packages (``monarch-rdma``,
``monarch-tensor``, ``monarch-launcher``) build on, so none of them reaches
into this package's private modules: making futures, this process's
address, splitting a worker's ``DIAL@BIND`` address (``alias_parts``), and
the lifecycle events of actors and processes (``subscribe(callback)``:
each ``monarch_supervision.LifecycleEvent`` of this process, on the thread
that saw it; callbacks must be quick), what a process is doing
(``inspect_process``, for the mesh admin), and progress lines for long
waits (``progress``, ``shows_progress``), and files only this user may
read (``private_dir``, ``check_private``, ``publish_record``/``read_records``:
where a job leaves what its user's tools need to reach it), and whether
this process has a GPU of its own (``has_own_gpu``: NCCL can carry its
CUDA tensors).

Examples:
    >>> import concurrent.futures
    >>> from monarch_actor.extension import future_from, resolved
    >>> cf = concurrent.futures.Future()
    >>> cf.set_result(7)
    >>> future_from(cf).get(), resolved("ok").get()
    (7, 'ok')
"""

from __future__ import annotations

import concurrent.futures
from typing import TypeVar

from ._api.hosts import alias_parts
from ._api.introspection import inspect_process
from ._api.mesh_ops import MeshOps
from ._core.extensions import EXTENSION_GROUP, extension, transform_arguments
from ._core.future import Future
from ._core.lifecycle import subscribe, unsubscribe
from ._core.private import (
    PrivateFileError,
    check_private,
    private_dir,
    publish_record,
    read_private,
    read_records,
    remove_record,
    write_private,
)
from ._core.process import maybe_runtime
from ._core.progress import Progress, progress, shows_progress
from ._procs.gpus import has_own_gpu

__all__ = [
    "EXTENSION_GROUP",
    "MeshOps",
    "PrivateFileError",
    "Progress",
    "alias_parts",
    "check_private",
    "extension",
    "future_from",
    "has_own_gpu",
    "inspect_process",
    "private_dir",
    "process_address",
    "progress",
    "publish_record",
    "read_private",
    "read_records",
    "remove_record",
    "resolved",
    "shows_progress",
    "subscribe",
    "transform_arguments",
    "unsubscribe",
    "write_private",
]

T = TypeVar("T")


def future_from(cf: concurrent.futures.Future[T]) -> Future[T]:
    """A Monarch ``Future`` that completes when ``cf`` does, with its result or its exception.

    Args:
        cf: the future to follow; it may be completed from any thread.

    Raises:
        TypeError: ``cf`` is not a ``concurrent.futures.Future``.
    """
    if not isinstance(cf, concurrent.futures.Future):
        raise TypeError(f"future_from() takes a concurrent.futures.Future, got {type(cf).__name__}")
    return Future._of(cf)


def resolved(value: T) -> Future[T]:
    """A Monarch ``Future`` that is already done with ``value``.

    Args:
        value: the future's result.
    """
    return Future._done(value)


def process_address() -> str | None:
    """The transport address this process's actor runtime listens on, or
    ``None`` when no runtime has started in this process (it never starts
    one)."""
    runtime = maybe_runtime()
    return runtime.address if runtime is not None else None
