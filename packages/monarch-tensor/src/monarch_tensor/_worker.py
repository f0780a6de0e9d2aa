"""The processes' side: per activated mesh and stream, a worker actor runs
the controller's commands in order on its own thread (streams of one
process run side by side); per activated mesh, a peer actor takes shards
sent from other meshes and discovers remote functions' result shapes, which
must not queue behind a stream that waits.

An operation that fails does not stop its stream: its outputs hold the
error (they are *poisoned*), later operations on them pass it on, and
fetching one raises it. Collectives run over torch.distributed process
groups made per stream and set of mesh dimensions, on a store one process
of the mesh serves, without a global ``init_process_group``.
"""

from __future__ import annotations

import datetime
import functools
import importlib
import socket
import traceback
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import Store
from torch.distributed import PrefixStore, TCPStore  # type: ignore[attr-defined]
from torch.distributed.distributed_c10d import GroupName
from torch.utils import _pytree as pytree

from monarch_actor import Actor, ActorMesh, current_rank, endpoint
from monarch_actor.extension import has_own_gpu, process_address

from ._errors import RemoteTensorError
from ._opaque import mark_worker
from ._table import TABLE, Poison, Ref

__all__ = [
    "REDUCTIONS",
    "GroupRef",
    "Meta",
    "Op",
    "TensorPeer",
    "TensorWorker",
    "reduce_shard",
    "run_op",
]

GROUP_TIMEOUT = datetime.timedelta(seconds=300)

# an operation as a command names it: the function itself (pickled by reference),
# ("path", "pkg.mod.fn") for a remote function given by its path, or ("attr", name)
# for a tensor property such as .T
Op = Callable[..., Any] | tuple[str, str]

REDUCTIONS: dict[str, Any] = {
    "sum": dist.ReduceOp.SUM,
    "avg": dist.ReduceOp.SUM,  # then divided by the group's size
    "product": dist.ReduceOp.PRODUCT,
    "min": dist.ReduceOp.MIN,
    "max": dist.ReduceOp.MAX,
    "band": dist.ReduceOp.BAND,
    "bor": dist.ReduceOp.BOR,
    "bxor": dist.ReduceOp.BXOR,
    "stack": None,
}


class GroupRef:
    """``DeviceMesh.process_group(dims)`` inside a command: on each process
    it becomes the torch.distributed process group over ``dims``."""

    __slots__ = ("dims",)

    def __init__(self, dims: tuple[str, ...]) -> None:
        self.dims = dims

    def __reduce__(self) -> tuple[Any, ...]:
        return (GroupRef, (self.dims,))

    def __repr__(self) -> str:
        return f"<process group over {self.dims}>"


_seeded = False


@functools.cache
def _by_path(path: str) -> Any:
    """The function ``pkg.mod.fn`` names (``remote("pkg.mod.fn")``)."""
    module, _, name = path.rpartition(".")
    if not module:
        raise ValueError(f"remote({path!r}): give the function as 'package.module.function'")
    found = importlib.import_module(module)
    for part in name.split(":"):
        found = getattr(found, part)
    return found


def run_op(op: Op, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
    """Run one operation on resolved arguments."""
    if not isinstance(op, tuple):
        return op(*args, **kwargs)
    how, name = op
    if how == "attr":  # a tensor property such as .T
        return getattr(args[0], name)
    return _by_path(name)(*args, **kwargs)


def _put_results(outs: Sequence[int], result: Any) -> None:
    tensors = [leaf for leaf in pytree.tree_leaves(result) if isinstance(leaf, torch.Tensor)]
    if len(tensors) != len(outs):
        raise RuntimeError(
            f"the operation gave {len(tensors)} tensors here but {len(outs)} at the controller "
            "(a remote function whose propagate= does not match what it returns?)"
        )
    for ref, tensor in zip(outs, tensors, strict=True):
        TABLE.put(ref, tensor)


class _Groups:
    """One stream's process groups over a mesh view, per set of dimensions.

    Each group carries tensors by their device: gloo for CPU tensors, NCCL
    for CUDA ones where every process has a GPU of its own (NCCL refuses two
    ranks on one GPU), else gloo for those too. So one mesh (one group,
    even) mixes CPU and CUDA tensors."""

    def __init__(self, stream: str, store: Store) -> None:
        self.stream = stream
        self.store = store
        self.groups: dict[tuple[str, ...], dist.ProcessGroup] = {}

    def group(self, dims: tuple[str, ...]) -> dist.ProcessGroup:
        """The ``torch.distributed.ProcessGroup`` over ``dims``."""
        made = self.groups.get(dims)
        if made is not None:
            return made
        point = current_rank()
        coords = dict(point)
        sizes = dict(point.extent.items())
        rank, size = 0, 1
        for dim in dims:  # row-major over the reduced dimensions
            rank = rank * sizes[dim] + coords[dim]
            size *= sizes[dim]
        rest = ",".join(f"{k}={v}" for k, v in coords.items() if k not in dims)
        name = f"{self.stream}/{'.'.join(dims)}/{rest}"
        made = _device_group(PrefixStore(name + "/", self.store), rank, size)
        made._set_group_name(GroupName(name))
        self.groups[dims] = made
        return made


def cuda_backend() -> str | None:
    """What carries this process's CUDA tensors: ``"nccl"``, ``"gloo"``, or
    None without CUDA."""
    if not torch.cuda.is_available():
        return None
    return "nccl" if dist.is_nccl_available() and has_own_gpu() else "gloo"


def _device_group(store: Store, rank: int, size: int) -> dist.ProcessGroup:
    backend_type = dist.ProcessGroup.BackendType
    group = dist.ProcessGroup(store, rank, size)
    gloo = dist.ProcessGroupGloo(PrefixStore("cpu/", store), rank, size, GROUP_TIMEOUT)
    group._register_backend(torch.device("cpu"), backend_type.GLOO, gloo)
    cuda = cuda_backend()
    if cuda == "nccl":
        nccl = dist.ProcessGroupNCCL(
            PrefixStore("cuda/", store), rank, size, dist.ProcessGroupNCCL.Options()
        )
        group._register_backend(torch.device("cuda"), backend_type.NCCL, nccl)
        group._set_default_backend(backend_type.NCCL)
    else:
        if cuda == "gloo":  # gloo reduces CUDA tensors too, through host memory
            group._register_backend(torch.device("cuda"), backend_type.GLOO, gloo)
        group._set_default_backend(backend_type.GLOO)
    return group


def reduce_shard(
    group: dist.ProcessGroup,
    tensor: torch.Tensor,
    reduction: str,
    scatter: bool,
    inplace: bool = False,
) -> torch.Tensor:
    """This process's result of reducing ``tensor`` over ``group`` (into
    ``tensor`` itself when ``inplace`` allows, without a copy)."""
    size, rank = group.size(), group.rank()
    if reduction == "stack":
        gathered = [torch.empty_like(tensor) for _ in range(size)]
        group.allgather([gathered], [tensor.contiguous()]).wait()
        if scatter:  # all-to-all: element i of each input's first dim goes to rank i
            return torch.stack([part[rank] for part in gathered])
        stacked: torch.Tensor = torch.stack(gathered)
        return stacked
    direct = inplace and not scatter and tensor.is_contiguous()
    result = tensor if direct else tensor.detach().clone().contiguous()
    options = dist.AllreduceOptions()
    options.reduceOp = REDUCTIONS[reduction]
    group.allreduce([result], options).wait()
    if reduction == "avg":
        if direct:
            result.div_(size, rounding_mode=None if result.is_floating_point() else "floor")
        else:
            result = result / size if result.is_floating_point() else result // size
    if scatter:
        part: torch.Tensor = result.chunk(size)[rank].clone()
        return part
    return result


def _error(error: BaseException, where: str) -> RemoteTensorError:
    if isinstance(error, RemoteTensorError):
        return error
    point = current_rank()
    return RemoteTensorError(
        f"{where} failed on the process at {dict(point)}: {type(error).__name__}: {error}\n"
        + "".join(traceback.format_exception(error)).rstrip()
    )


def _poison(outs: Sequence[int], error: RemoteTensorError) -> None:
    poison = Poison(error)
    for ref in outs:
        TABLE.put(ref, poison)


def _to_cpu(tree: Any) -> Any:
    return pytree.tree_map(
        lambda leaf: leaf.detach().cpu() if isinstance(leaf, torch.Tensor) else leaf, tree
    )


class TensorWorker(Actor):
    """Runs the controller's tensor commands on this process, for one stream
    of one mesh view."""

    def __init__(self, stream: str = "main") -> None:
        self.stream = stream
        self.groups: _Groups | None = None
        mark_worker()  # remote functions run here: OpaqueRef values may live here
        global _seeded
        if not _seeded:  # procs forked from one server share its random state
            torch.seed()
            _seeded = True

    def _resolve(self, tree: Any) -> Any:
        def get(leaf: Any) -> Any:
            if isinstance(leaf, Ref):
                return TABLE.tensor(leaf.id)
            if isinstance(leaf, GroupRef):
                return self._group(leaf.dims)
            return leaf

        return pytree.tree_map(get, tree)

    def _group(self, dims: tuple[str, ...]) -> dist.ProcessGroup:
        if self.groups is None:
            raise RuntimeError("no store: the controller sends one before the first collective")
        return self.groups.group(dims)

    @endpoint
    def run(self, batch: list[tuple[Any, ...]]) -> None:
        """Run a batch of commands in order; failures poison their outputs."""
        for command in batch:
            getattr(self, "_" + command[0])(*command[1:])

    def _op(
        self,
        op: Op,
        args: Sequence[Any],
        kwargs: dict[str, Any],
        outs: list[int],
        where: str,
        grad: bool,
    ) -> None:
        try:
            with torch.set_grad_enabled(grad):
                _put_results(outs, run_op(op, *self._resolve((args, kwargs))))
        except Exception as error:
            _poison(outs, _error(error, where))

    def _fail(self, outs: list[int], message: str) -> None:
        _poison(outs, RemoteTensorError(f"the controller could not send {message}"))

    def _drop(self, refs: list[int]) -> None:
        for ref in refs:
            TABLE.pop(ref)

    def _reduce(
        self,
        source: int,
        out: int,
        dims: tuple[str, ...],
        reduction: str,
        scatter: bool,
        inplace: bool,
        where: str,
    ) -> None:
        try:
            tensor = TABLE.tensor(source)
            group = self._group(dims)
            result = reduce_shard(group, tensor, reduction, scatter, inplace)
            if inplace and result is not tensor:
                with torch.no_grad():
                    tensor.copy_(result)
                result = tensor
            TABLE.put(out, result)
        except Exception as error:
            _poison([out], _error(error, where))

    def _store(self, host: str, port: int, size: int) -> None:
        if self.groups is None:
            store = TCPStore(host, port, size, False, timeout=GROUP_TIMEOUT)
            self.groups = _Groups(self.stream, store)

    def _borrow(self, source: int, new: int) -> None:
        TABLE.put(new, TABLE.get(source))  # the same tensor (or its poison), another name

    def _lend(self, source: int, new: int, ranks: frozenset[int] | None) -> None:
        """``source`` under the name ``new`` for an endpoint's message, where
        the endpoint's actor gets it (``ranks`` of this mesh; None: all): it
        takes it from there, so freeing ``source`` cannot overtake it."""
        if ranks is None or current_rank().rank in ranks:
            self._borrow(source, new)

    def _signal(self, token: int) -> None:
        TABLE.put(token, True)

    def _wait(self, token: int) -> None:
        try:
            TABLE.get(token)
        finally:
            TABLE.pop(token)

    def _rank(self, dims: tuple[str, ...], out: int) -> None:
        point = current_rank()
        coords, sizes = dict(point), dict(point.extent.items())
        index = 0
        for dim in dims:
            index = index * sizes[dim] + coords[dim]
        TABLE.put(out, torch.tensor(index))

    def _grads(
        self,
        roots: list[int],
        wrt: list[int],
        grad_roots: list[int | None],
        outs: list[int],
        where: str,
    ) -> None:
        """Backward from ``roots``; each gradient is put in the table as soon
        as autograd makes it, so another stream can reduce it meanwhile."""
        made: set[int] = set()
        handles = []
        try:
            root_tensors = [TABLE.tensor(ref) for ref in roots]
            inputs = [TABLE.tensor(ref) for ref in wrt]
            seeds = [None if ref is None else TABLE.tensor(ref) for ref in grad_roots] or None

            for tensor, out in zip(inputs, outs, strict=True):

                def produced(grad: torch.Tensor, out: int = out) -> None:
                    TABLE.put(out, grad.detach().contiguous())
                    made.add(out)

                handles.append(tensor.register_hook(produced))
            grads = torch.autograd.grad(root_tensors, inputs, seeds, allow_unused=True)
            for tensor, out, grad in zip(inputs, outs, grads, strict=True):
                if out not in made:  # not reached from the roots: zero, as DDP has it
                    TABLE.put(out, torch.zeros_like(tensor) if grad is None else grad.detach())
        except Exception as error:
            _poison([out for out in outs if out not in made], _error(error, where))
        finally:
            for handle in handles:
                handle.remove()

    def _send(
        self,
        source: int,
        new: int,
        peers: ActorMesh[TensorPeer],
        dims: tuple[str, ...],
        only: dict[str, int],
    ) -> None:
        """``to_mesh``: send this process's shard to the processes of the
        destination that share its coordinates along ``dims``."""
        coords = dict(current_rank())
        if any(coords[dim] != index for dim, index in only.items()):
            return  # sliced away by slice_mesh()
        value = TABLE.get(source)
        payload: Any = ("poison", str(value.error)) if isinstance(value, Poison) else value
        peers.slice(**{dim: coords[dim] for dim in dims}).receive.broadcast(new, payload)

    @endpoint
    def serve_store(self, size: int) -> tuple[str, int]:
        """Serve the store this mesh's process groups meet at; where it listens."""
        host = _reachable_host()
        store = TCPStore(host, 0, size, True, timeout=GROUP_TIMEOUT, wait_for_workers=False)
        self.groups = _Groups(self.stream, store)
        return host, store.port

    @endpoint
    def fetch(self, ref: int) -> tuple[bool, Any]:
        """``(True, shard)``: this process's shard of tensor ``ref`` on the
        CPU, in the order of this stream; ``(False, message)`` if an
        operation it depends on failed."""
        try:
            value = TABLE.get(ref)
        except RemoteTensorError as error:
            return False, str(error)
        if isinstance(value, Poison):
            return False, str(value.error)
        return True, value.detach().cpu()

    @endpoint
    def call(self, op: Op, args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
        """A remote function's value on this process (its tensors on the CPU)."""
        return _to_cpu(run_op(op, *self._resolve((args, kwargs))))


class TensorPeer(Actor):
    """Beside the streams of one mesh view: shards sent from other meshes,
    and shape discovery for remote functions (neither may wait behind a
    stream)."""

    def __init__(self) -> None:
        mark_worker()

    @endpoint
    def receive(self, ref: int, value: Any) -> None:
        """A shard sent from another mesh (``to_mesh``)."""
        if isinstance(value, tuple):
            TABLE.put(ref, Poison(RemoteTensorError(value[1])))
        else:
            TABLE.put(ref, value)

    @endpoint
    def propagate(self, op: Op, args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
        """What a remote function returns on this process, with each tensor
        replaced by its ``Meta``. Runs on copies, so the shards are not changed."""
        resolved = pytree.tree_map(
            lambda leaf: TABLE.tensor(leaf.id).clone() if isinstance(leaf, Ref) else leaf,
            (args, kwargs),
        )
        result = run_op(op, *resolved)
        return pytree.tree_map(
            lambda leaf: Meta(leaf) if isinstance(leaf, torch.Tensor) else leaf, result
        )


class Meta:
    """A tensor's shape, strides, dtype, device and ``requires_grad``."""

    __slots__ = ("device", "dtype", "requires_grad", "shape", "stride")

    def __init__(self, tensor: torch.Tensor) -> None:
        self.shape = tuple(tensor.shape)
        self.stride = tensor.stride()
        self.dtype = tensor.dtype
        self.device = str(tensor.device)
        self.requires_grad = tensor.requires_grad

    def __getstate__(self) -> Any:
        return (self.shape, self.stride, self.dtype, self.device, self.requires_grad)

    def __setstate__(self, state: Any) -> None:
        self.shape, self.stride, self.dtype, self.device, self.requires_grad = state


def _reachable_host() -> str:
    """The host part of this process's address (where other processes reach it)."""
    address = process_address() or ""
    scheme, _, rest = address.partition("://")
    if scheme in ("tcp", "tls+tcp") and rest:
        return rest.rpartition(":")[0].strip("[]")
    return socket.gethostbyname("localhost")
