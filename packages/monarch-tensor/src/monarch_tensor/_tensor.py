"""Distributed tensors at the controller, and how torch operations on them
become commands.

Each operation's result shape, dtype and device come from torch's fake
tensors here, at once (a shape error is raised at the line that caused it);
the operation itself becomes a small command for the worker of its stream on
every process of the mesh, which runs it on its own shard. Nothing waits
until a value is fetched. Streams are the order commands run in: each has
its own worker thread per process, and a tensor belongs to the stream that
made it until another stream borrows it.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import sys
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NoReturn, Protocol, SupportsIndex

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.overrides import TorchFunctionMode
from torch.utils import _pytree as pytree

from monarch_actor import ActorMesh, ProcMesh

from ._active import suspend, suspended
from ._table import Ref
from ._worker import Op, TensorPeer, TensorWorker

__all__ = [
    "FAKE",
    "MAIN",
    "Borrow",
    "Stream",
    "Tensor",
    "TensorMesh",
    "dispatch",
    "emit",
    "faking",
    "get_active_mesh",
    "get_active_stream",
    "incorrect",
    "meshes",
    "new_ref",
    "streams",
    "prepare",
    "where",
]

# a shape error found by a fake tensor is raised to the user; torch would also log it
logging.getLogger("torch._subclasses.fake_tensor").setLevel(logging.CRITICAL)

FAKE = FakeTensorMode(allow_non_fake_inputs=True)
_ids = itertools.count(1)
_here = __file__.rsplit("/", 1)[0]


@contextlib.contextmanager
def faking() -> Iterator[None]:
    """Torch on fake tensors, here (not another distributed operation)."""
    with suspend(), FAKE:
        yield


def new_ref() -> int:
    """A reference number no tensor (or token) of this controller had."""
    return next(_ids)


def where(name: str) -> str:
    """The operation and the line of the user's code that issued it."""
    frame = sys._getframe(1)
    while frame.f_back is not None and (
        frame.f_code.co_filename.startswith(_here)
        or "/torch/" in frame.f_code.co_filename
        or frame.f_code.co_filename.startswith("<")
    ):
        frame = frame.f_back
    return f"{name} (at {frame.f_code.co_filename}:{frame.f_lineno})"


class TensorMesh(Protocol):
    """A device mesh as its distributed tensors and their operations see it
    (``DeviceMesh``, made above this module from a proc mesh, is the one
    kind): its dimensions, its activation, the commands it sends its
    processes' workers, and the reductions and moves of a tensor on it."""

    @property
    def names(self) -> tuple[str, ...]:
        """The mesh's dimension names."""
        ...

    def size(self, dim: str | Sequence[str] | None = None) -> int:
        """The number of processes along ``dim`` (all of them by default)."""
        ...

    def activate(self) -> contextlib.AbstractContextManager[TensorMesh]:
        """Make this mesh the active one for the ``with`` block."""
        ...

    def flush(self) -> None:
        """Send the commands issued so far."""
        ...

    @property
    def _procs(self) -> ProcMesh: ...

    @property
    def _peers(self) -> ActorMesh[TensorPeer]: ...

    def _worker(self, stream: str) -> ActorMesh[TensorWorker]: ...

    def _send(self, stream: str, command: tuple[Any, ...]) -> None: ...

    def _drop(self, stream: str, ref: int) -> None: ...

    def _reduce(
        self,
        tensor: Tensor,
        dims: str | Sequence[str],
        reduction: str,
        scatter: bool,
        mesh: object,
        inplace: bool,
    ) -> Tensor: ...

    def _to_mesh(
        self,
        tensor: Tensor,
        coords: dict[str, int],
        mesh: TensorMesh | ProcMesh,
        stream: Stream | None,
    ) -> Tensor: ...


meshes: list[TensorMesh] = []  # of the enclosing activate() blocks, innermost last
streams: list[Stream] = []  # of the enclosing stream.activate() blocks, innermost last


def incorrect(message: str) -> TypeError:
    """Monarch's error for arguments an operation cannot take."""
    return TypeError(f"Incorrect arguments to monarch operation: {message}")


def get_active_mesh() -> TensorMesh:
    """The ``DeviceMesh`` of the innermost ``activate()`` block."""
    if not meshes or suspended():
        raise ValueError("no device mesh is active")
    return meshes[-1]


# -- streams ---------------------------------------------------------------------------


class Stream:
    """An order of execution on every process: operations issued while a
    stream is active run one after another on its own thread, beside the
    other streams (``main`` computes while ``comms`` reduces). Streams of
    the same name are the same stream.

    Args:
        name: the stream's name; each name gets its own worker on every process.

    Attributes:
        name: the stream's name.
    """

    def __init__(self, name: str) -> None:
        self.name = name

    @contextlib.contextmanager
    def activate(self) -> Iterator[Stream]:
        """Make this the stream operations run on, for the ``with`` block."""
        streams.append(self)
        try:
            yield self
        finally:
            streams.pop()

    def borrow(self, t: Tensor, mutable: bool = False) -> tuple[Tensor, Borrow]:
        """``t`` for use on this stream, once its own stream has made it.

        Until ``borrow.drop()``, ``t``'s own stream may read it but not write it
        (with ``mutable=True``, not use it at all: this stream may write it).

        Args:
            t: a distributed tensor of another stream.
            mutable: let this stream write the borrowed tensor.

        Returns:
            The tensor on this stream, and the ``Borrow`` that gives it back
            (``drop()``, or use it as a context manager).

        Raises:
            TypeError: ``t`` is not a distributed tensor, was dropped, or is already
                lent in a way this borrow conflicts with.
            ValueError: ``t`` already belongs to this stream.
        """
        if not isinstance(t, Tensor):
            raise TypeError(f"borrow() takes a distributed tensor, got {type(t).__name__}")
        _usable(t, "borrow")
        if t._stream.name == self.name:
            raise ValueError(f"{t!r} is already on {self}: nothing to borrow")
        if t._lent and (mutable or any(b.mutable for b in t._lent)):
            raise incorrect(
                f"BORROWED: {t!r} is already lent to another stream; a mutable borrow "
                "needs it alone"
            )
        new = new_ref()
        borrowed = Tensor(t._fake, t._mesh, new, self)
        borrow = Borrow(t, borrowed, mutable)
        borrowed._borrow = borrow
        t._lent.append(borrow)
        t._mesh._send(self.name, ("borrow", t._ref, new))
        return borrowed, borrow

    def __repr__(self) -> str:
        return f"<Stream({self.name!r}) at {hex(id(self))}>"

    def __str__(self) -> str:
        return f"stream {self.name!r}"


MAIN = Stream("main")


def get_active_stream() -> Stream:
    """The stream of the innermost ``stream.activate()`` block (``main``)."""
    return streams[-1] if streams else MAIN


class Borrow:
    """A tensor lent to another stream (``stream.borrow``); ``drop()`` gives
    it back: its own stream then waits until the borrower is done with it.

    Made by ``Stream.borrow``; a ``with`` block over it drops it at its end.

    Args:
        origin: the lent tensor, on its own stream.
        borrowed: the tensor as the borrowing stream sees it.
        mutable: whether the borrowing stream may write it.

    Attributes:
        origin: the lent tensor, on its own stream.
        borrowed: the tensor as the borrowing stream sees it.
        mutable: whether the borrowing stream may write it.
        dropped: whether ``drop()`` has ended the borrow.
    """

    def __init__(self, origin: Tensor, borrowed: Tensor, mutable: bool) -> None:
        self.origin = origin
        self.borrowed = borrowed
        self.mutable = mutable
        self.dropped = False

    def drop(self) -> None:
        """End the borrow (the borrowed tensor cannot be used afterwards)."""
        if self.dropped:
            return
        self.dropped = True
        mesh, token = self.origin._mesh, new_ref()
        mesh._send(self.borrowed._stream.name, ("drop", [self.borrowed._ref]))
        mesh._send(self.borrowed._stream.name, ("signal", token))
        mesh._send(self.origin._stream.name, ("wait", token))
        self.borrowed._ref = -abs(self.borrowed._ref)
        self.origin._lent.remove(self)

    def __enter__(self) -> Borrow:
        return self

    def __exit__(self, *exc: object) -> None:
        self.drop()

    def __repr__(self) -> str:
        state = "dropped" if self.dropped else "mutable" if self.mutable else "read-only"
        return f"<Borrow {state} of {self.origin!r} on {self.borrowed._stream}>"


# -- tensors ---------------------------------------------------------------------------


class Tensor(torch.Tensor):
    """A distributed tensor: one shard on every process of its mesh. Its
    shape, dtype and device are known here; its values live on the
    processes (``fetch_shard`` brings one shard back)."""

    _fake: torch.Tensor
    _mesh: TensorMesh
    _ref: int
    _stream: Stream
    _lent: list[Borrow]
    _borrow: Borrow | None

    @staticmethod
    def __new__(cls, fake: torch.Tensor, mesh: TensorMesh, ref: int, stream: Stream) -> Tensor:
        with torch._C.DisableTorchFunction():  # reading the fake's metadata is not an operation
            made: Tensor = torch.Tensor._make_wrapper_subclass(
                cls,
                fake.size(),
                strides=fake.stride(),
                storage_offset=fake.storage_offset(),
                dtype=fake.dtype,
                layout=fake.layout,
                device=fake.device,
                requires_grad=fake.requires_grad,
            )
        made._fake, made._mesh, made._ref, made._stream = fake, mesh, ref, stream
        made._lent, made._borrow = [], None
        weakref.finalize(made, mesh._drop, stream.name, ref)
        return made

    @classmethod
    def __torch_function__(
        cls, func: Any, types: Any, args: Sequence[Any] = (), kwargs: Any = None
    ) -> Any:
        return dispatch(func, args, kwargs or {})

    @classmethod
    def __torch_dispatch__(  # type: ignore[override]
        cls, func: Any, types: Any, args: Sequence[Any] = (), kwargs: Any = None
    ) -> Any:
        raise TypeError(
            f"{func} reached a distributed tensor's data, which lives on its mesh: use "
            "fetch_shard(tensor).get() to bring a shard here"
        )

    @property
    def mesh(self) -> TensorMesh:
        """The mesh whose processes hold this tensor."""
        return self._mesh

    @property
    def stream(self) -> Stream:
        """The stream this tensor belongs to."""
        return self._stream

    @property
    def dropped(self) -> bool:
        """Whether ``drop()`` freed this tensor."""
        return self._ref < 0

    def drop(self) -> None:
        """Free this tensor's shards now (it cannot be used afterwards)."""
        if self._ref > 0:
            self._mesh._drop(self._stream.name, self._ref)
            self._ref = -self._ref

    def reduce(
        self,
        dims: str | Sequence[str] = (),
        reduction: str = "sum",
        scatter: bool = False,
        mesh: object = None,
        _inplace: bool = False,
        out: Any = None,
    ) -> Tensor:
        """Reduce across the processes along some mesh dimensions.

        The result is a new distributed tensor on this tensor's stream; the
        collective runs over a torch.distributed group (gloo on CPU, NCCL on GPU).

        Args:
            dims: the mesh dimension(s) to reduce across; empty: every dimension.
            reduction: ``sum``, ``avg``, ``product``, ``min``, ``max``, ``band``,
                ``bor``, ``bxor`` (all-reduce), or ``stack`` (all-gather, adding an
                outer dimension of the group's size).
            scatter: keep only this process's slice of the result along dimension 0
                (reduce-scatter; with ``stack``: all-to-all). Needs exactly one dimension.
            mesh: only ``None`` is supported: the reduction runs on this tensor's mesh.
            _inplace: write the result into this tensor (what ``reduce_`` does).
            out: accepted for compatibility and ignored.

        Returns:
            The reduced distributed tensor (this one, when ``_inplace``).

        Raises:
            TypeError: ``mesh`` was given, or this tensor cannot be used on the active
                stream (dropped, lent, or of another stream).
            KeyError: a name in ``dims`` is not a dimension of the mesh.
            ValueError: an unknown reduction, a repeated dimension, several dimensions
                with ``stack`` or ``scatter``, a tensor that requires grad, a shape that
                ``scatter`` cannot split, or an in-place reduction that changes the shape.
        """
        reduced: Tensor = self._mesh._reduce(self, dims, reduction, scatter, mesh, _inplace)
        return reduced

    def reduce_(
        self,
        dims: str | Sequence[str] = (),
        reduction: str = "sum",
        scatter: bool = False,
        mesh: object = None,
    ) -> Tensor:
        """``reduce`` in place (only reductions that keep the shape).

        Args:
            dims: the mesh dimension(s) to reduce across; empty: every dimension.
            reduction: the reduction, as for ``reduce``.
            scatter: as for ``reduce`` (only where the shape stays the same).
            mesh: only ``None`` is supported: the reduction runs on this tensor's mesh.

        Returns:
            This tensor, which holds the result.

        Raises:
            ValueError: the reduction would change the shape (use ``reduce``), or any
                error of ``reduce``.
        """
        reduced: Tensor = self._mesh._reduce(self, dims, reduction, scatter, mesh, True)
        return reduced

    def to_mesh(self, mesh: TensorMesh | ProcMesh, stream: Stream | None = None) -> Tensor:
        """This tensor on another mesh whose dimensions have the same names and sizes.

        A dimension of ``mesh`` that this tensor's mesh lacks gets a copy of the
        shard at every index (with a warning).

        Args:
            mesh: the destination ``DeviceMesh`` (or a ``ProcMesh``).
            stream: the stream the copy belongs to there; ``None``: the active one.

        Returns:
            The distributed tensor on ``mesh``.

        Raises:
            TypeError: ``mesh`` is not a mesh, or this tensor cannot be used now.
            ValueError: a dimension of this tensor's mesh is missing from ``mesh`` or
                has another size there (``slice_mesh`` first to choose shards).
        """
        moved: Tensor = self._mesh._to_mesh(self, {}, mesh, stream)
        return moved

    def slice_mesh(self, **coords: int) -> MeshSliceTensor:
        """The shards at ``coords`` (e.g. ``stage=0``), to move ``to_mesh``.

        Args:
            **coords: the index to keep along some dimensions of the mesh.

        Returns:
            The selected shards, whose ``to_mesh`` moves them.

        Raises:
            KeyError: a name is not a dimension of the mesh.
            IndexError: an index is outside its dimension.
        """
        for name, index in coords.items():
            if name not in self._mesh.names:
                raise KeyError(f"{name!r} is not a dimension of {self._mesh!r}")
            if not 0 <= index < self._mesh.size(name):
                raise IndexError(f"{name}={index} is outside 0..{self._mesh.size(name) - 1}")
        return MeshSliceTensor(self, coords)

    def __repr__(self, *args: Any, **kwargs: Any) -> str:  # type: ignore[override]
        return f"monarch.Tensor(mesh={self._mesh!r}, stream={self._stream}, fake={self._fake!r})"

    def __reduce_ex__(self, protocol: SupportsIndex) -> NoReturn:
        raise TypeError(
            "a distributed tensor cannot be pickled: pass it to an endpoint of actors on its "
            "mesh, or to spawn() on its mesh (each actor gets its own shard), or fetch_shard() it"
        )


class MeshSliceTensor:
    """Some shards of a distributed tensor (``t.slice_mesh(...)``), on their
    way to another mesh.

    Args:
        tensor: the distributed tensor the shards belong to.
        coords: the index kept along each sliced mesh dimension.

    Attributes:
        tensor: the distributed tensor the shards belong to.
        coords: the index kept along each sliced mesh dimension.
    """

    def __init__(self, tensor: Tensor, coords: dict[str, int]) -> None:
        self.tensor = tensor
        self.coords = coords

    def to_mesh(self, mesh: TensorMesh | ProcMesh, stream: Stream | None = None) -> Tensor:
        """These shards on ``mesh``, whose dimensions are the remaining (unsliced) ones.

        Args:
            mesh: the destination ``DeviceMesh`` (or a ``ProcMesh``); its dimensions
                must include the unsliced ones, with the same sizes.
            stream: the stream the copy belongs to there; ``None``: the active one.

        Returns:
            The distributed tensor on ``mesh``.

        Raises:
            TypeError: ``mesh`` is not a mesh, or the tensor cannot be used now.
            ValueError: an unsliced dimension is missing from ``mesh`` or has another
                size there.
        """
        moved: Tensor = self.tensor._mesh._to_mesh(self.tensor, self.coords, mesh, stream)
        return moved

    def __repr__(self) -> str:
        return f"<MeshSliceTensor {self.coords} of {self.tensor!r}>"


def _usable(t: Tensor, what: str) -> None:
    if t._ref < 0:
        if t._borrow is not None:
            raise incorrect(f"{what}: a borrowed tensor was used after its borrow was dropped")
        raise incorrect(f"{what}: a tensor was used after drop()")


# -- operations ------------------------------------------------------------------------


class Prepared:
    """An operation's arguments split into what runs here (fakes) and what
    is sent (references in place of distributed tensors)."""

    __slots__ = ("fake_args", "fake_kwargs", "inputs", "mesh", "sent", "stream")

    def __init__(self) -> None:
        self.mesh: TensorMesh | None = None
        self.stream: Stream | None = None
        self.inputs: dict[int, Tensor] = {}
        self.fake_args: Sequence[Any] = ()
        self.fake_kwargs: dict[str, Any] = {}
        self.sent: tuple[Sequence[Any], dict[str, Any]] = ((), {})


def prepare(
    name: str, args: Sequence[Any], kwargs: Mapping[str, Any], *, active: bool = True
) -> Prepared:
    """Check an operation's distributed tensors (same mesh, the active
    stream, not dropped or lent) and split its arguments."""
    flat, spec = pytree.tree_flatten((args, kwargs))
    out = Prepared()
    mesh = meshes[-1] if active and meshes and not suspended() else None
    stream = get_active_stream() if mesh is not None else None
    fakes: list[Any] = []
    sent: list[Any] = []
    for leaf in flat:
        if isinstance(leaf, Tensor):
            _usable(leaf, name)
            if mesh is None:
                mesh = leaf._mesh
            elif leaf._mesh is not mesh:
                raise incorrect(
                    f"WRONG_MESH: {name} uses a tensor of {leaf._mesh!r} while {mesh!r} is "
                    "active (move it with to_mesh())"
                )
            if stream is None:
                stream = leaf._stream
            elif leaf._stream.name != stream.name:
                raise incorrect(
                    f"WRONG_STREAM: {name} on {stream} uses a tensor of {leaf._stream} "
                    "(borrow it with stream.borrow())"
                )
            if any(b.mutable for b in leaf._lent):
                raise incorrect(
                    f"BORROWED: {name} uses a tensor lent mutably to "
                    f"{leaf._lent[0].borrowed._stream}: drop the borrow first"
                )
            fakes.append(leaf._fake)
            sent.append(Ref(leaf._ref))
            out.inputs[id(leaf._fake)] = leaf
        else:
            fakes.append(leaf)
            sent.append(leaf)
    out.mesh, out.stream = mesh, stream
    out.fake_args, out.fake_kwargs = pytree.tree_unflatten(fakes, spec)
    out.sent = pytree.tree_unflatten(sent, spec)
    return out


def run_fake(
    name: str, fn: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any]
) -> Any:
    """``fn`` on fake tensors: the result's metadata, without running it."""
    try:
        with faking():
            return fn(*args, **kwargs)
    except RuntimeError as error:
        text = str(error)
        if "data-dependent" in text or "item()" in text or "DataDependent" in type(error).__name__:
            raise RuntimeError(
                f"{name} needs a distributed tensor's values, which live on its mesh: "
                "fetch_shard(tensor).get() brings one shard here"
            ) from None
        raise


def emit(op: Op, name: str, prepared: Prepared, result: Any, *, fresh: bool = False) -> Any:
    """Send operation ``op`` and make the distributed tensors of its fake
    ``result``. A result that is one of the inputs is that input (an
    in-place operation) unless ``fresh``."""
    mesh, stream = prepared.mesh, prepared.stream
    assert mesh is not None and stream is not None
    leaves, out_spec = pytree.tree_flatten(result)
    outs: list[int] = []
    made: list[Any] = []
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            same = None if fresh else prepared.inputs.get(id(leaf))
            if same is not None:  # in place: the result is the input
                if same._lent:
                    raise incorrect(
                        f"BORROWED: {name} writes a tensor lent to {same._lent[0].borrowed._stream}"
                    )
                if same._borrow is not None and not same._borrow.mutable:
                    raise incorrect(f"{name} writes a tensor borrowed without mutable=True")
                outs.append(same._ref)
                made.append(same)
            else:
                ref = new_ref()
                outs.append(ref)
                made.append(Tensor(_fresh(leaf) if fresh else leaf, mesh, ref, stream))
        else:
            made.append(leaf)
    sent_args, sent_kwargs = prepared.sent
    grad = torch.is_grad_enabled()
    mesh._send(stream.name, ("op", op, sent_args, sent_kwargs, outs, where(name), grad))
    return pytree.tree_unflatten(made, out_spec)


def _fresh(fake: torch.Tensor) -> torch.Tensor:
    with faking():
        return torch.empty_strided(
            fake.size(), fake.stride(), dtype=fake.dtype, device=fake.device
        ).requires_grad_(fake.requires_grad)


def dispatch(func: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
    """A torch function called on distributed tensors (or under an active mesh)."""
    name = getattr(func, "__name__", str(func))
    prepared = prepare(name, args, kwargs)
    result = run_fake(name, func, prepared.fake_args, prepared.fake_kwargs)
    if prepared.mesh is None:
        return result
    leaves = pytree.tree_leaves(result)
    if result is not None and not any(isinstance(leaf, torch.Tensor) for leaf in leaves):
        return result  # metadata only (a size, a dtype): nothing to run on the mesh
    if result is None and not prepared.inputs:
        return result  # nothing distributed involved
    return emit(_op(func), name, prepared, result)


def _op(func: Callable[..., Any]) -> Op:
    """How a command names the operation: the function itself (pickled by
    reference), or ("attr", name) for a tensor property."""
    owner: Any = getattr(func, "__self__", None)
    if type(owner).__name__ == "getset_descriptor":
        return ("attr", owner.__name__)
    return func


# What reads a plain (local) tensor's values: under an active mesh these still
# run here on a local tensor, as in Monarch (``fetch_shard(t).get().item()``,
# or an endpoint's result, read inside ``activate()``); anything else a local
# tensor takes part in runs on the mesh.
_LOCAL_ACCESSORS = frozenset(
    {
        torch.Tensor.item,
        torch.Tensor.tolist,
        torch.Tensor.__bool__,
        torch.Tensor.__int__,
        torch.Tensor.__float__,
        torch.Tensor.__index__,
        torch.Tensor.__complex__,
    }
)


class Mode(TorchFunctionMode):
    """Under an active mesh: torch functions make distributed tensors."""

    def __torch_function__(
        self, func: Any, types: Any, args: Sequence[Any] = (), kwargs: Any = None
    ) -> Any:
        if suspended() or (func in _LOCAL_ACCESSORS and args and not isinstance(args[0], Tensor)):
            return func(*args, **(kwargs or {}))
        return dispatch(func, args, kwargs or {})


def _operator(name: str) -> Any:
    """An operator of distributed tensors. torch's own turns a ``TypeError``
    into ``NotImplemented`` (Python then says only "unsupported operand"),
    which would hide why an operation is refused; this one raises it."""
    func = getattr(torch.Tensor, name)

    def operator(self: Tensor, *args: Any) -> Any:
        return dispatch(func, (self, *args), {})

    operator.__name__ = name
    return operator


_BINARY = (
    "add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul",
    "and", "or", "xor", "lshift", "rshift",
)  # fmt: skip
_OPERATORS = [f"__{prefix}{name}__" for name in _BINARY for prefix in ("", "r", "i")] + [
    "__eq__",
    "__ne__",
    "__lt__",
    "__le__",
    "__gt__",
    "__ge__",
]

for _name in _OPERATORS:
    if hasattr(torch.Tensor, _name):
        setattr(Tensor, _name, _operator(_name))
