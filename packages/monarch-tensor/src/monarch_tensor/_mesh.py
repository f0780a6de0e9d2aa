"""``DeviceMesh``: the processes of a proc mesh seen as devices for
distributed tensors, what ``proc_mesh.activate()`` makes active.

Commands are batched per stream (a run of operations leaves at once when it
is long, or after a couple of milliseconds) and broadcast to that stream's
worker on every process; the controller never waits for them.
"""

from __future__ import annotations

import collections
import contextlib
import threading
import warnings
from collections.abc import Iterator, Sequence
from typing import Any, TypeVar

import torch

from monarch_actor import Actor, ActorMesh, ProcMesh
from monarch_actor.extension import MeshOps, mesh_shape, proc_mesh_id, with_shape
from monarch_mesh import Shape
from monarch_transport import EncodeError, encode

from ._tensor import (
    MAIN,
    Mode,
    Stream,
    Tensor,
    TensorMesh,
    faking,
    get_active_stream,
    incorrect,
    meshes,
    new_ref,
    prepare,
    streams,
    where,
)
from ._worker import REDUCTIONS, GroupRef, TensorPeer, TensorWorker

__all__ = [
    "DeviceMesh",
    "RemoteProcessGroup",
    "activate",
    "activation",
    "coalescing",
    "device_mesh",
]

BATCH_MAX = 512  # commands: a longer run of operations leaves at once
BATCH_DELAY = 0.002  # seconds a short run waits for more before it leaves

_coalescing = threading.local()

A = TypeVar("A", bound=Actor)
M = TypeVar("M", bound=TensorMesh)  # a device mesh, or what stands for one to its tensors


def spawn_mesh(procs: ProcMesh, name: str, cls: type[A], *args: object) -> ActorMesh[A]:
    """``procs.spawn(name, cls, *args)`` as the actor mesh it is (``spawn`` is
    typed as the actor class, for its endpoints)."""
    actors: object = procs.spawn(name, cls, *args)
    if not isinstance(actors, ActorMesh):
        raise TypeError(f"ProcMesh.spawn() returned {type(actors).__name__}, not an ActorMesh")
    return actors


class DeviceMesh(MeshOps):
    """The processes of a proc mesh as devices for distributed tensors:
    tensors made while it is active live on every one of its processes.
    Slicing, ``rename``, ``split`` and ``flatten`` give the device mesh of
    the same processes so arranged.

    Usually made by ``proc_mesh.activate()`` rather than directly.

    Args:
        procs: the proc mesh whose processes hold the tensors; a worker actor is
            spawned on each of them.
    """

    def __init__(self, procs: ProcMesh) -> None:
        self._procs = procs
        self._shape = mesh_shape(procs)
        self._workers: dict[str, ActorMesh[TensorWorker]] = {}
        self._peers = spawn_mesh(procs, "monarch_tensor_peer", TensorPeer)
        self._lock = threading.RLock()
        self._batches: dict[str, list[tuple[Any, ...]]] = {}
        # refs freed by tensors' finalizers, not yet in a batch (see _drop)
        self._dropped: collections.deque[tuple[str, int]] = collections.deque()
        self._timer: threading.Timer | None = None
        self._store: tuple[str, int] | None = None
        self._stores_sent: set[str] = set()
        self._worker(MAIN.name)

    def _new_with_shape(self, shape: Shape) -> DeviceMesh:
        return device_mesh(with_shape(self._procs, shape))

    @property
    def names(self) -> tuple[str, ...]:
        """The mesh's dimension names."""
        return tuple(self._shape.labels)

    def activate(self) -> contextlib.AbstractContextManager[DeviceMesh]:
        """Make this mesh the active one for the ``with`` block."""
        return activation(self)

    def rank(self, dims: str | Sequence[str]) -> Tensor:
        """A distributed scalar: each process's index along ``dims``.

        Args:
            dims: a dimension name, or several (the index is then row-major over them).

        Returns:
            A distributed ``torch.long`` scalar on this mesh, on the active stream.

        Raises:
            KeyError: a name is not a dimension of this mesh.
        """
        names = (dims,) if isinstance(dims, str) else tuple(dims)
        for name in names:
            if name not in self.names:
                raise KeyError(f"{self!r} does not have dimension {name!r}")
        stream = get_active_stream()
        out = new_ref()
        self._send(stream.name, ("rank", names, out))
        with faking():
            fake = torch.zeros((), dtype=torch.long)
        return Tensor(fake, self, out, stream)

    @property
    def ranks(self) -> dict[str, Tensor]:
        """``rank(dim)`` for every dimension."""
        return {name: self.rank(name) for name in self.names}

    def process_group(self, dims: str | Sequence[str]) -> RemoteProcessGroup:
        """The torch.distributed process group over ``dims``, for remote functions.

        Passed to a ``remote`` function, it arrives as each process's group.

        Args:
            dims: a dimension name, or several: the group joins the processes that
                differ only along them.

        Returns:
            A reference to the group, to pass as an argument.

        Raises:
            KeyError: a name is not a dimension of this mesh.
        """
        return RemoteProcessGroup(dims, self)

    def to_table(self) -> str:
        """The processes as a table: each one's coordinates and rank."""
        names = list(self.names)
        rows = [[*map(str, point.values()), str(rank)] for rank, point in _points(self._shape)]
        header = [*names, "process"]
        widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

        def line(cells: list[str]) -> str:
            return "  ".join(cell.rjust(width) for cell, width in zip(cells, widths, strict=True))

        return "\n".join([line(header), *(line(row) for row in rows)])

    # -- commands ----------------------------------------------------------------------

    def _worker(self, stream: str) -> ActorMesh[TensorWorker]:
        worker = self._workers.get(stream)
        if worker is None:
            name = "monarch_tensor" if stream == MAIN.name else f"monarch_tensor_{stream}"
            worker = self._workers[stream] = spawn_mesh(self._procs, name, TensorWorker, stream)
        return worker

    def _send(self, stream: str, command: tuple[Any, ...]) -> None:
        with self._lock:
            self._take_drops_locked()
            batch = self._batches.setdefault(stream, [])
            batch.append(command)
            if getattr(_coalescing, "depth", 0):
                _coalescing.meshes.add(self)
            elif len(batch) >= BATCH_MAX:
                self._flush_locked()
            elif self._timer is None:
                self._timer = threading.Timer(BATCH_DELAY, self.flush)
                self._timer.daemon = True
                self._timer.start()

    def _drop(self, stream: str, ref: int) -> None:
        """Free ``ref`` after the commands issued so far (it leaves with the next
        batch). A tensor's finalizer calls this, on whatever thread the garbage
        collector runs: it never sends, and takes no lock, since that thread may
        be one that the lock's holder is waiting for (a timer thread starting)."""
        self._dropped.append((stream, ref))

    def _take_drops_locked(self) -> None:
        """Move the refs ``_drop`` noted into their streams' batches."""
        while self._dropped:
            stream, ref = self._dropped.popleft()
            batch = self._batches.setdefault(stream, [])
            if batch and batch[-1][0] == "drop":
                batch[-1][1].append(ref)
            else:
                batch.append(("drop", [ref]))

    def flush(self) -> None:
        """Send the commands issued so far (fetching does this itself)."""
        with self._lock:
            self._flush_locked()

    def _flush_locked(self) -> None:
        self._take_drops_locked()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        batches, self._batches = self._batches, {}
        for stream, batch in batches.items():
            if batch:
                self._broadcast(stream, batch)

    def _broadcast(self, stream: str, batch: list[tuple[Any, ...]]) -> None:
        run = self._worker(stream).run
        try:
            run.broadcast(batch)
        except EncodeError:
            # a command that cannot be sent fails its outputs there (found on fetch)
            run.broadcast([_sendable(command) for command in batch])
        except Exception:
            pass  # a failed mesh: its fetches report it, from supervision

    def _ensure_store(self, stream: str) -> None:
        """Before a stream's first collective: the store its groups meet at
        (served by the first process's main worker)."""
        if stream in self._stores_sent:
            return
        if self._store is None:
            self.flush()
            first = self._worker(MAIN.name).slice(**{name: 0 for name in self.names})
            self._store = first.serve_store.call_one(self.size()).get()
        host, port = self._store
        self._send(stream, ("store", host, port, self.size()))
        self._stores_sent.add(stream)

    # -- collectives -------------------------------------------------------------------

    def _reduce(
        self,
        tensor: Tensor,
        dims: str | Sequence[str],
        reduction: str,
        scatter: bool,
        mesh: object,
        inplace: bool,
    ) -> Tensor:
        if mesh is not None:
            raise TypeError("reduce(mesh=...) is not supported: reduce on the tensor's own mesh")
        names = (dims,) if isinstance(dims, str) else tuple(dims)
        if not names:
            names = self.names
        if len(set(names)) != len(names):
            raise ValueError(f"reduce() got a dimension twice: {names}")
        for name in names:
            if name not in self.names:
                raise KeyError(
                    f"{name!r} is not a dimension of {self!r} (its dimensions: {self.names})"
                )
        if reduction not in REDUCTIONS:
            raise ValueError(f"unknown reduction {reduction!r}: use one of {sorted(REDUCTIONS)}")
        if (reduction == "stack" or scatter) and len(names) != 1:
            raise ValueError(
                f"reduce({reduction!r}, scatter={scatter}) takes exactly one dimension"
            )
        if tensor.requires_grad:
            raise ValueError("reduce() of a tensor that requires grad is not supported")
        size = self.size(names)
        shape = list(tensor.shape)
        if reduction == "stack" and not scatter:
            shape = [size, *shape]
        elif scatter:
            if not shape or shape[0] % size:
                raise ValueError(
                    f"reduce(scatter=True) splits dimension 0 among {size} processes: the "
                    f"tensor's shape {tuple(tensor.shape)} does not divide"
                )
            if reduction != "stack":
                shape[0] //= size
        if inplace and shape != list(tensor.shape):
            raise ValueError(
                f"reduce_({reduction!r}, scatter={scatter}) changes the shape: use reduce()"
            )
        checked = _checked(tensor, "reduce", inplace)
        stream = checked._stream.name
        self._ensure_store(stream)
        out = tensor._ref if inplace else new_ref()
        command = ("reduce", tensor._ref, out, names, reduction, scatter, inplace, where("reduce"))
        self._send(stream, command)
        if inplace:
            return tensor
        with faking():
            fake = torch.empty(shape, dtype=tensor.dtype, device=tensor.device)
        return Tensor(fake, self, out, checked._stream)

    def _to_mesh(
        self,
        tensor: Tensor,
        coords: dict[str, int],
        mesh: TensorMesh | ProcMesh,
        stream: Stream | None,
    ) -> Tensor:
        if isinstance(mesh, ProcMesh):
            mesh = device_mesh(mesh)
        if not isinstance(mesh, DeviceMesh):
            raise TypeError(f"to_mesh() takes a DeviceMesh, got {type(mesh).__name__}")
        _checked(tensor, "to_mesh", False)
        left = {name: self.size(name) for name in self.names if name not in coords}
        for name, size in left.items():
            if name not in mesh.names:
                raise ValueError(
                    f"to_mesh(): {mesh!r} has no dimension {name!r} of the tensor's mesh: "
                    f"slice_mesh({name}=...) first to choose the shards to move"
                )
            if mesh.size(name) != size:
                raise ValueError(
                    f"to_mesh(): dimension {name!r} has {size} processes here and "
                    f"{mesh.size(name)} on {mesh!r}"
                )
        extra = [name for name in mesh.names if name not in left]
        if extra:
            warnings.warn(
                f"to_mesh(): the tensor has no dimension {extra} of {mesh!r}: every process "
                "along it gets the same shard",
                stacklevel=3,
            )
        target = stream or get_active_stream()
        new = new_ref()
        dims = tuple(left)
        self._send(tensor._stream.name, ("send", tensor._ref, new, mesh._peers, dims, coords))
        self.flush()
        return Tensor(tensor._fake, mesh, new, target)

    def __repr__(self) -> str:
        processes = list(self._shape.ndslice)
        return f"<DeviceMesh(names({self.names!r}), processes({processes})) at {hex(id(self))}>"


class RemoteProcessGroup:
    """The controller's handle on a torch.distributed process group over some
    dimensions of a device mesh (what ``DeviceMesh.process_group(dims)``
    returns). Passed to a ``remote`` function, it arrives on each process as
    the group of the processes that differ from it only along ``dims``
    (gloo, or NCCL where the function's stream runs CUDA work and torch has it).

    Args:
        dims: a dimension name, or several.
        device_mesh: the mesh whose processes form the groups.

    Attributes:
        dims: the dimensions the group spans, as a tuple.
        device_mesh: the mesh whose processes form the groups.

    Raises:
        KeyError: a name is not a dimension of ``device_mesh``.
    """

    def __init__(self, dims: str | Sequence[str], device_mesh: DeviceMesh) -> None:
        names = (dims,) if isinstance(dims, str) else tuple(dims)
        for name in names:
            if name not in device_mesh.names:
                raise KeyError(f"{device_mesh!r} does not have dimension {name!r}")
        self.dims: tuple[str, ...] = names
        self.device_mesh = device_mesh
        self.ensure_split_comm_remotely(get_active_stream())

    def ensure_split_comm_remotely(self, stream: Stream) -> None:
        """Make the group usable by remote functions on ``stream`` (done for
        the stream active when the group was made).

        Args:
            stream: the stream whose remote functions will use the group.
        """
        self.device_mesh._ensure_store(stream.name)

    def size(self) -> int:
        """How many processes each group joins."""
        return int(self.device_mesh.size(self.dims))

    def __reduce__(self) -> tuple[Any, ...]:
        return (GroupRef, (self.dims,))  # on the wire: only the dimensions

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RemoteProcessGroup):
            return NotImplemented
        return self.dims == other.dims and self.device_mesh is other.device_mesh

    def __hash__(self) -> int:
        return hash((self.dims, id(self.device_mesh)))

    def __repr__(self) -> str:
        return f"<RemoteProcessGroup over {self.dims} of {self.device_mesh!r}>"


def _sendable(command: tuple[Any, ...]) -> tuple[Any, ...]:
    try:
        encode(command)
    except EncodeError as error:
        outs = command[4] if command[0] == "op" else []
        return ("fail", outs, f"{command[-2] if command[0] == 'op' else command[0]}: {error}")
    return command


def _checked(tensor: Tensor, name: str, inplace: bool) -> Tensor:
    """``tensor`` if an operation may use it now (and write it, if ``inplace``)."""
    prepare(name, (tensor,), {}, active=False)  # not dropped, not lent mutably
    active = streams[-1] if streams else None
    if active is not None and active.name != tensor._stream.name:
        raise incorrect(
            f"WRONG_STREAM: {name} on {active} uses a tensor of {tensor._stream} "
            "(borrow it with stream.borrow())"
        )
    if inplace and tensor._lent:
        raise incorrect(f"BORROWED: {name} writes a tensor lent to another stream")
    if inplace and tensor._borrow is not None and not tensor._borrow.mutable:
        raise incorrect(f"{name} writes a tensor borrowed without mutable=True")
    return tensor


def _points(shape: Shape) -> Iterator[tuple[int, dict[str, int]]]:
    sizes = shape.extent.sizes
    labels = shape.labels
    for position, rank in enumerate(shape.ndslice):
        point: dict[str, int] = {}
        rest = position
        for label, size in zip(reversed(labels), reversed(sizes), strict=True):
            point[label] = rest % size
            rest //= size
        yield rank, dict(reversed(list(point.items())))


_meshes: dict[tuple[str, tuple[str, ...], tuple[int, ...], tuple[int, ...]], DeviceMesh] = {}
_meshes_lock = threading.Lock()


def device_mesh(procs: ProcMesh) -> DeviceMesh:
    """The one device mesh of these processes so arranged."""
    shape = mesh_shape(procs)
    key = (
        proc_mesh_id(procs),
        tuple(shape.labels),
        tuple(shape.extent.sizes),
        tuple(shape.ndslice),
    )
    with _meshes_lock:
        mesh = _meshes.get(key)
        if mesh is None:
            mesh = _meshes[key] = DeviceMesh(procs)
        return mesh


def activate(procs: ProcMesh) -> contextlib.AbstractContextManager[DeviceMesh]:
    """``ProcMesh.activate()`` (the ``monarch.extensions`` hook)."""
    return activation(device_mesh(procs))


@contextlib.contextmanager
def activation(mesh: M) -> Iterator[M]:
    """Make ``mesh`` the active one for a ``with`` block."""
    meshes.append(mesh)
    try:
        with Mode():
            yield mesh
    finally:
        meshes.pop()
        mesh.flush()


@contextlib.contextmanager
def coalescing() -> Iterator[None]:
    """Hold the block's commands and send them together at its end (one
    message per stream and mesh)."""
    if not getattr(_coalescing, "depth", 0):
        _coalescing.meshes = set()
    _coalescing.depth = getattr(_coalescing, "depth", 0) + 1
    try:
        yield
    finally:
        _coalescing.depth -= 1
        if not _coalescing.depth:
            held, _coalescing.meshes = _coalescing.meshes, set()
            for mesh in held:
                mesh.flush()
