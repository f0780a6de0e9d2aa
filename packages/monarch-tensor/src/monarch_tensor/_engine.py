"""The controller's side: under ``with proc_mesh.activate():`` torch
operations make distributed tensors. Each operation's result shape, dtype
and device come from torch's fake tensors here, at once (a shape error is
raised at the line that caused it); the operation itself becomes a small
command, batched with its neighbours and broadcast to a worker actor on
every process of the mesh, which runs it on its own shard. Nothing waits
until a value is fetched.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import sys
import threading
import weakref
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.overrides import TorchFunctionMode
from torch.utils import _pytree as pytree

from monarch_actor import Future, ProcMesh, returns_future

from ._errors import RemoteTensorError
from ._worker import REDUCTIONS, Ref, TensorWorker

__all__ = [
    "DeviceMesh",
    "Tensor",
    "activate",
    "fetch_shard",
    "get_active_mesh",
    "inspect",
    "no_mesh",
    "reduce",
    "reduce_",
    "show",
]

# a shape error found by a fake tensor is raised to the user; torch would also log it
logging.getLogger("torch._subclasses.fake_tensor").setLevel(logging.CRITICAL)

BATCH_MAX = 512  # commands: a longer run of operations leaves at once
BATCH_DELAY = 0.002  # seconds a short run waits for more before it leaves

_FAKE = FakeTensorMode(allow_non_fake_inputs=True)
_ids = itertools.count(1)
_here = __file__.rsplit("/", 1)[0]


def _where(name: str) -> str:
    """The operation and the line of the user's code that issued it."""
    frame = sys._getframe(2)
    while frame.f_back is not None and (
        frame.f_code.co_filename.startswith(_here) or "/torch/" in frame.f_code.co_filename
    ):
        frame = frame.f_back
    return f"{name} (at {frame.f_code.co_filename}:{frame.f_lineno})"


class DeviceMesh:
    """The processes of a proc mesh seen as devices for distributed tensors
    (what ``proc_mesh.activate()`` makes active); tensors made under it
    live on every one of its processes."""

    def __init__(self, procs: ProcMesh) -> None:
        self._procs = procs
        self._workers = procs.spawn("monarch_tensor_worker", TensorWorker)
        self._lock = threading.Lock()
        self._batch: list[tuple[Any, ...]] = []
        self._drops: list[int] = []
        self._timer: threading.Timer | None = None
        self._store_sent = False

    @property
    def names(self) -> tuple[str, ...]:
        """The mesh's dimension names."""
        return tuple(self._procs.extent.keys())

    def size(self, dim: str | None = None) -> int:
        """How many processes (along ``dim``, or in all)."""
        return self._procs.size(dim) if dim is not None else len(self._procs)

    @property
    def sizes(self) -> dict[str, int]:
        """Each dimension's size."""
        return dict(self._procs.extent.items())

    def activate(self) -> contextlib.AbstractContextManager[DeviceMesh]:
        """Make this mesh the active one for the ``with`` block."""
        return _activation(self)

    # -- commands ----------------------------------------------------------------------

    def _send(self, command: tuple[Any, ...]) -> None:
        with self._lock:
            self._batch.append(command)
            if len(self._batch) >= BATCH_MAX:
                self._flush_locked()
            elif self._timer is None:
                self._timer = threading.Timer(BATCH_DELAY, self.flush)
                self._timer.daemon = True
                self._timer.start()

    def _drop(self, ref: int) -> None:
        with self._lock:
            self._drops.append(ref)

    def flush(self) -> None:
        """Send the commands issued so far (fetching does this itself)."""
        with self._lock:
            self._flush_locked()

    def _flush_locked(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._drops:
            self._batch.append(("drop", self._drops))
            self._drops = []
        if self._batch:
            batch, self._batch = self._batch, []
            with contextlib.suppress(Exception):  # a failed mesh is reported by supervision
                self._workers.run.broadcast(batch)

    def _ensure_store(self) -> None:
        """The first collective: one process serves the store process groups meet at."""
        if self._store_sent:
            return
        first = self._workers.slice(**{name: 0 for name in self.names})  # type: ignore[attr-defined]
        host, port = first.serve_store.call_one(self.size()).get()
        self._send(("store", host, port, self.size()))
        self._store_sent = True

    def __repr__(self) -> str:
        return (
            f"<DeviceMesh(names({self.names!r}), processes({list(range(self.size()))})) "
            f"at {hex(id(self))}>"
        )


_meshes: weakref.WeakKeyDictionary[ProcMesh, DeviceMesh] = weakref.WeakKeyDictionary()
_active: list[DeviceMesh] = []
_suspended = threading.local()


def activate(procs: ProcMesh) -> contextlib.AbstractContextManager[DeviceMesh]:
    """``ProcMesh.activate()`` (the ``monarch.extensions`` hook)."""
    mesh = _meshes.get(procs)
    if mesh is None:
        mesh = _meshes[procs] = DeviceMesh(procs)
    return _activation(mesh)


@contextlib.contextmanager
def _activation(mesh: DeviceMesh) -> Iterator[DeviceMesh]:
    _active.append(mesh)
    mode = _Mode()
    try:
        with mode:
            yield mesh
    finally:
        _active.pop()
        mesh.flush()


def get_active_mesh() -> DeviceMesh:
    """The mesh of the innermost ``activate()`` block."""
    if not _active or getattr(_suspended, "on", False):
        raise ValueError("no device mesh is active")
    return _active[-1]


class _NoMesh:
    """``no_mesh.activate()``: plain local torch inside an active block."""

    @contextlib.contextmanager
    def activate(self) -> Iterator[None]:
        """Run torch locally for the ``with`` block."""
        before = getattr(_suspended, "on", False)
        _suspended.on = True
        try:
            yield
        finally:
            _suspended.on = before


no_mesh = _NoMesh()


class _Mode(TorchFunctionMode):
    def __torch_function__(
        self, func: Any, types: Any, args: Sequence[Any] = (), kwargs: Any = None
    ) -> Any:
        if getattr(_suspended, "on", False):
            return func(*args, **(kwargs or {}))
        return _dispatch(func, args, kwargs or {}, _active[-1] if _active else None)


class Tensor(torch.Tensor):
    """A distributed tensor: one shard on every process of its mesh. Its
    shape, dtype and device are known here; its values live on the
    processes (``fetch_shard`` brings one shard back)."""

    _fake: torch.Tensor
    _mesh: DeviceMesh
    _ref: int

    @staticmethod
    def __new__(cls, fake: torch.Tensor, mesh: DeviceMesh, ref: int) -> Tensor:
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
        made._fake, made._mesh, made._ref = fake, mesh, ref
        weakref.finalize(made, mesh._drop, ref)
        return made

    @classmethod
    def __torch_function__(
        cls, func: Any, types: Any, args: Sequence[Any] = (), kwargs: Any = None
    ) -> Any:
        return _dispatch(func, args, kwargs or {}, None)

    @classmethod
    def __torch_dispatch__(  # type: ignore[override]
        cls, func: Any, types: Any, args: Sequence[Any] = (), kwargs: Any = None
    ) -> Any:
        raise TypeError(
            f"{func} reached a distributed tensor's data, which lives on its mesh: use "
            "fetch_shard(tensor).get() to bring a shard here"
        )

    @property
    def mesh(self) -> DeviceMesh:
        """The mesh whose processes hold this tensor."""
        return self._mesh

    @property
    def stream(self) -> str:
        """The stream this tensor was made on."""
        return "stream 'main'"

    @property
    def dropped(self) -> bool:
        """Whether ``drop()`` freed this tensor."""
        return self._ref < 0

    def drop(self) -> None:
        """Free this tensor's shards now (it cannot be used afterwards)."""
        if self._ref > 0:
            self._mesh._drop(self._ref)
            self._ref = -self._ref

    def reduce(
        self,
        dims: str | Sequence[str] = (),
        reduction: str = "sum",
        scatter: bool = False,
        mesh: Any = None,
        _inplace: bool = False,
        out: Any = None,
    ) -> Tensor:
        """Reduce across the processes along the mesh dimensions ``dims``
        (all if empty): ``sum``, ``avg``, ``product``, ``min``, ``max``,
        ``band``, ``bor``, ``bxor`` (all-reduce), ``stack`` (all-gather,
        adding an outer dimension); ``scatter=True`` keeps this process's
        slice of the result along dimension 0 (reduce-scatter; with
        ``stack``: all-to-all)."""
        return _reduce(self, dims, reduction, scatter, mesh, _inplace)

    def reduce_(
        self,
        dims: str | Sequence[str] = (),
        reduction: str = "sum",
        scatter: bool = False,
        mesh: Any = None,
    ) -> Tensor:
        """``reduce`` in place (only reductions that keep the shape)."""
        return _reduce(self, dims, reduction, scatter, mesh, True)

    def __repr__(self, *args: Any, **kwargs: Any) -> str:  # type: ignore[override]
        return f"monarch.Tensor(mesh={self._mesh!r}, stream={self.stream}, fake={self._fake!r})"

    def __reduce_ex__(self, protocol: Any) -> Any:
        raise TypeError(
            "a distributed tensor cannot be pickled: pass it to an endpoint of an actor on its "
            "mesh (each actor gets its own shard) or fetch_shard() it"
        )


def _incorrect(func: Any, message: str) -> TypeError:
    return TypeError(f"Incorrect arguments to monarch operation: {message}")


def _operator(name: str) -> Any:
    """An operator of distributed tensors. torch's own turns a ``TypeError``
    into ``NotImplemented`` (Python then says only "unsupported operand"),
    which would hide why an operation is refused; this one raises it."""
    func = getattr(torch.Tensor, name)

    def operator(self: Tensor, *args: Any) -> Any:
        return _dispatch(func, (self, *args), {}, _active[-1] if _active else None)

    operator.__name__ = name
    return operator


_BINARY = (
    "add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul",
    "and", "or", "xor", "lshift", "rshift",
)  # fmt: skip
_OPERATORS = [f"__{prefix}{name}__" for name in _BINARY for prefix in ("", "r")] + [
    "__eq__",
    "__ne__",
    "__lt__",
    "__le__",
    "__gt__",
    "__ge__",
]


def _dispatch(func: Any, args: Sequence[Any], kwargs: Any, active: DeviceMesh | None) -> Any:
    flat, spec = pytree.tree_flatten((args, kwargs))
    mesh: DeviceMesh | None = None
    fakes: list[Any] = []
    sent: list[Any] = []
    inputs: dict[int, Tensor] = {}
    for leaf in flat:
        if isinstance(leaf, Tensor):
            if leaf._ref < 0:
                raise _incorrect(func, "a tensor was used after drop()")
            if mesh is None:
                mesh = leaf._mesh
            elif leaf._mesh is not mesh:
                raise _incorrect(
                    func,
                    f"WRONG_MESH: {getattr(func, '__name__', func)} mixes tensors of "
                    "different meshes",
                )
            fakes.append(leaf._fake)
            sent.append(Ref(leaf._ref))
            inputs[id(leaf._fake)] = leaf
        else:
            fakes.append(leaf)
            sent.append(leaf)
    if mesh is None:
        mesh = active
    if active is not None and mesh is not active:
        raise _incorrect(
            func, "WRONG_MESH: a tensor of another mesh is used while this one is active"
        )
    fake_args, fake_kwargs = pytree.tree_unflatten(fakes, spec)
    before = getattr(_suspended, "on", False)
    _suspended.on = True  # the fake run below is plain torch, not another distributed op
    try:
        with _FAKE:
            result = func(*fake_args, **fake_kwargs)
    except RuntimeError as error:
        if (
            "data-dependent" in str(error)
            or "item()" in str(error)
            or "DataDependent" in type(error).__name__
        ):
            raise RuntimeError(
                f"{getattr(func, '__name__', func)} needs a distributed tensor's values, "
                "which live on its mesh: fetch_shard(tensor).get() brings one shard here"
            ) from None
        raise
    finally:
        _suspended.on = before
    leaves, out_spec = pytree.tree_flatten(result)
    if mesh is None or not (
        any(isinstance(leaf, torch.Tensor) for leaf in leaves) or _mutates(func)
    ):
        return result  # metadata only (a size, a dtype): nothing to run on the mesh
    outs: list[int] = []
    made: list[Any] = []
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            same = inputs.get(id(leaf))
            if same is not None:  # in place: the result is the input
                outs.append(same._ref)
                made.append(same)
            else:
                ref = next(_ids)
                outs.append(ref)
                made.append(Tensor(leaf, mesh, ref))
        else:
            made.append(leaf)
    op = _op(func)
    sent_args, sent_kwargs = pytree.tree_unflatten(sent, spec)
    mesh._send(("op", op, sent_args, sent_kwargs, outs, _where(getattr(func, "__name__", "op"))))
    return pytree.tree_unflatten(made, out_spec)


for _name in _OPERATORS:
    if hasattr(torch.Tensor, _name):
        setattr(Tensor, _name, _operator(_name))


def _mutates(func: Any) -> bool:
    return getattr(func, "__name__", "") == "__setitem__"


def _op(func: Any) -> Any:
    """How a command names the operation: the function itself (pickled by
    reference), or ("attr", name) for a tensor property."""
    owner: Any = getattr(func, "__self__", None)
    if type(owner).__name__ == "getset_descriptor":
        return ("attr", owner.__name__)
    return func


# -- collectives -----------------------------------------------------------------------


def _reduce(
    tensor: Tensor,
    dims: str | Sequence[str],
    reduction: str,
    scatter: bool,
    mesh: Any,
    inplace: bool,
) -> Tensor:
    if mesh is not None:
        raise TypeError("reduce(mesh=...) is not supported: reduce on the tensor's own mesh")
    on = tensor._mesh
    names = (dims,) if isinstance(dims, str) else tuple(dims)
    if not names:
        names = on.names
    if len(set(names)) != len(names):
        raise ValueError(f"reduce() got a dimension twice: {names}")
    for name in names:
        if name not in on.names:
            raise KeyError(f"{name!r} is not a dimension of {on!r} (its dimensions: {on.names})")
    if reduction not in REDUCTIONS:
        raise ValueError(f"unknown reduction {reduction!r}: use one of {sorted(REDUCTIONS)}")
    if (reduction == "stack" or scatter) and len(names) != 1:
        raise ValueError(f"reduce({reduction!r}, scatter={scatter}) takes exactly one dimension")
    if tensor.requires_grad:
        raise ValueError("reduce() of a tensor that requires grad is not supported")
    size = 1
    for name in names:
        size *= on.size(name)
    shape = list(tensor.shape)
    if reduction == "stack" and not scatter:
        shape = [size, *shape]
    elif scatter:
        if not shape or shape[0] % size:
            raise ValueError(
                f"reduce(scatter=True) splits dimension 0 among {size} processes: the tensor's "
                f"shape {tuple(tensor.shape)} does not divide"
            )
        if reduction != "stack":
            shape[0] //= size
    if inplace and shape != list(tensor.shape):
        raise ValueError(
            f"reduce_({reduction!r}, scatter={scatter}) changes the shape: use reduce()"
        )
    on._ensure_store()
    out = tensor._ref if inplace else next(_ids)
    where = _where("reduce")
    on._send(("reduce", tensor._ref, out, names, reduction, scatter, inplace, where))
    if inplace:
        return tensor
    with _FAKE:
        fake = torch.empty(shape, dtype=tensor.dtype, device=tensor.device)
    return Tensor(fake, on, out)


def reduce(
    tensors: Any,
    dims: str | Sequence[str] = (),
    reduction: str = "sum",
    scatter: bool = False,
    mesh: Any = None,
    _inplace: bool = False,
) -> Any:
    """``Tensor.reduce`` over every distributed tensor of a pytree."""
    return pytree.tree_map(
        lambda t: (
            _reduce(t, dims, reduction, scatter, mesh, _inplace) if isinstance(t, Tensor) else t
        ),
        tensors,
    )


def reduce_(
    tensors: Any,
    dims: str | Sequence[str] = (),
    reduction: str = "sum",
    scatter: bool = False,
    mesh: Any = None,
) -> Any:
    """``Tensor.reduce_`` over every distributed tensor of a pytree."""
    return reduce(tensors, dims, reduction, scatter, mesh, True)


# -- fetching ------------------------------------------------------------------------


def _coordinates(
    mesh: DeviceMesh, shard: dict[str, int] | None, coords: dict[str, int]
) -> dict[str, int]:
    given = {**(shard or {}), **coords}
    if shard is None and not coords:
        return {name: 0 for name in mesh.names}
    for name in given:
        if name not in mesh.names:
            raise KeyError(
                f"{name!r} is not a dimension of {mesh!r} (its dimensions: {mesh.names})"
            )
    for name in mesh.names:
        if name not in given:
            raise ValueError(f"Missing key '{name}' in shard map {given}: give every dimension")
        if not 0 <= given[name] < mesh.size(name):
            raise IndexError(f"{name}={given[name]} is outside 0..{mesh.size(name) - 1}")
    return given


def fetch_shard(obj: Any, shard: dict[str, int] | None = None, **coords: int) -> Future[Any]:
    """A ``Future`` of ``obj`` (any pytree) with each distributed tensor
    replaced by its shard on the process at ``shard``/``coords`` (every
    dimension of the mesh; none: the first process), as a CPU tensor."""
    leaves, spec = pytree.tree_flatten(obj)
    asked: list[tuple[int, Future[Any]]] = []
    for index, leaf in enumerate(leaves):
        if isinstance(leaf, Tensor):
            if leaf._ref < 0:
                raise TypeError("fetch_shard() of a tensor after drop()")
            where = _coordinates(leaf._mesh, shard, coords)
            leaf._mesh.flush()
            workers = leaf._mesh._workers.slice(**where)  # type: ignore[attr-defined]
            asked.append((index, workers.fetch.call_one(leaf._ref)))

    @returns_future
    async def gather() -> Any:
        values = list(leaves)
        for index, future in asked:
            ok, value = await future
            if not ok:
                raise RemoteTensorError(value)
            values[index] = value
        return pytree.tree_unflatten(values, spec)

    result: Future[Any] = gather()
    return result


def inspect(obj: Any, shard: dict[str, int] | None = None, **coords: int) -> Any:
    """``fetch_shard(obj, shard, **coords).get()``."""
    return fetch_shard(obj, shard, **coords).get()


def show(obj: Any, shard: dict[str, int] | None = None, **coords: int) -> None:
    """Display a shard: with ``torchshow`` when it is installed, else printed."""
    value = inspect(obj, shard, **coords)
    try:
        import torchshow  # type: ignore[import-not-found]
    except ImportError:
        print(value)  # noqa: T201 (show() displays; without torchshow, printing is how)
    else:
        torchshow.show(value)
