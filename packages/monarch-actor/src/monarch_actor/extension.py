"""The small public surface sibling packages (``monarch-rdma``,
``monarch-tensor``, ``monarch-launcher``, ``monarch-admin``) build on, so none of them reaches
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
CUDA tensors), and threads that serve beside the user's script without
taking its Ctrl-C (``background_thread``).

It is also what a sibling may know of a mesh or an endpoint beyond their
user-facing API, so no package touches another's private attributes
(``tools/check-imports`` fails on one): a mesh's ``Shape``
(``mesh_shape``) and the same mesh over another shape (``with_shape``),
which processes a proc mesh is (``proc_mesh_id``), an actor mesh's proc
mesh and name (``actor_procs``, ``actor_mesh_name``), an endpoint's actor
mesh (``endpoint_mesh``), and calls whose results stay where they are made
(``call_and_keep``, for the ``rref`` adverb).

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
from collections.abc import Callable
from typing import Any, TypeAlias, TypeVar

from monarch_mesh import Shape

from ._api.endpoint import ActorEndpoint
from ._api.hosts import alias_parts
from ._api.introspection import inspect_process
from ._api.mesh import ActorMesh, ProcMesh
from ._api.mesh_ops import MeshOps
from ._core import extensions as _extensions
from ._core.extensions import EXTENSION_GROUP, extension
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
from ._core.threads import background_thread
from ._procs.gpus import has_own_gpu

__all__ = [
    "EXTENSION_GROUP",
    "ArgumentTransform",
    "MeshOps",
    "PrivateFileError",
    "Progress",
    "actor_mesh_name",
    "actor_procs",
    "alias_parts",
    "background_thread",
    "call_and_keep",
    "check_private",
    "endpoint_mesh",
    "extension",
    "future_from",
    "has_own_gpu",
    "inspect_process",
    "mesh_shape",
    "private_dir",
    "proc_mesh_id",
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
    "with_shape",
    "write_private",
]

T = TypeVar("T")
M = TypeVar("M", bound=MeshOps)

ArgumentTransform: TypeAlias = Callable[
    [ActorMesh[Any], tuple[Any, ...], dict[str, Any]], tuple[tuple[Any, ...], dict[str, Any]]
]
"""``transform(actor_mesh, args, kwargs) -> (args, kwargs)``: what
``transform_arguments`` registers (``actor_mesh`` is the mesh, or slice, called)."""


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


def transform_arguments(transform: ArgumentTransform) -> None:
    """Rewrite the arguments of every endpoint call and every spawn (an actor's
    constructor arguments) made from this process from now on.

    Transforms apply in the order they were registered; registering one twice
    has no effect.

    Args:
        transform: ``transform(actor_mesh, args, kwargs) -> (args, kwargs)``,
            called on the calling thread before the arguments are pickled.
    """
    _extensions.transform_arguments(transform)


def mesh_shape(mesh: MeshOps) -> Shape:
    """The ``Shape`` of a mesh (host, proc, actor or value mesh, or a sibling's):
    its named dimensions over the ranks it covers.

    Args:
        mesh: the mesh, or a slice of one.
    """
    return mesh._shape


def with_shape(mesh: M, shape: Shape) -> M:
    """The same mesh, of the same kind, restricted or reshaped to ``shape``
    (a shape over the ranks of the mesh it was sliced from).

    Args:
        mesh: the mesh, or a slice of one.
        shape: the new shape, such as ``mesh_shape(mesh).index(gpu=0)``.
    """
    return mesh._new_with_shape(shape)


def proc_mesh_id(procs: ProcMesh) -> str:
    """Which processes a proc mesh is: the same id for the mesh and all its
    slices and reshapes, another for every other proc mesh of the job (ranks
    of ``mesh_shape(procs)`` then say which of its processes a slice covers).

    Args:
        procs: the proc mesh, or a slice of one.
    """
    return procs._table.id


def actor_procs(actors: ActorMesh[Any]) -> ProcMesh:
    """The proc mesh (or slice) an actor mesh was spawned on, however the
    actors were sliced since: they cover the ranks ``mesh_shape(actors)`` of
    its processes.

    Args:
        actors: the actor mesh, or a slice of one.
    """
    return actors._procs


def actor_mesh_name(actors: ActorMesh[Any]) -> str:
    """The name an actor mesh was spawned with (``procs.spawn(name, ...)``).

    Args:
        actors: the actor mesh, or a slice of one.
    """
    return actors._spawn_name


def endpoint_mesh(endpoint: ActorEndpoint[..., Any]) -> ActorMesh[Any]:
    """The actor mesh, or slice, whose actors an endpoint messages.

    Args:
        endpoint: ``actors.method``.
    """
    mesh = endpoint._mesh  # what the endpoint messages, as the endpoint sees it
    assert isinstance(mesh, ActorMesh), f"an endpoint of {type(mesh).__name__}"
    return mesh


def call_and_keep(
    endpoint: ActorEndpoint[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], keep: object
) -> None:
    """Call every actor of the endpoint's mesh without answering: each
    receiving process hands the result to its ``keep`` extension (entry
    point of group ``monarch.extensions``) with ``keep``. The arguments are
    checked, transformed and pickled on the calling thread, as for ``call``.

    Args:
        endpoint: ``actors.method``.
        args: the positional arguments.
        kwargs: the keyword arguments.
        keep: what the ``keep`` extension receives with each result (a small,
            picklable value, such as where to store it).

    Raises:
        TypeError: the arguments do not fit the method's signature.
    """
    endpoint._keep(args, kwargs, keep)
