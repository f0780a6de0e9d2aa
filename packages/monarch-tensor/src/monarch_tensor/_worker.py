"""The processes' side: a worker actor per activated mesh runs the
controller's commands in order, keeping each process's tensors (its shards)
in one table by reference number, shared by every mesh view of the process.

An operation that fails does not stop the stream: its outputs hold the
error (they are *poisoned*), later operations on them pass it on, and
fetching one raises it. Collectives run over torch.distributed process
groups made per set of mesh dimensions, on a store one process of the mesh
serves, without a global ``init_process_group``.
"""

from __future__ import annotations

import datetime
import socket
import traceback
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed import PrefixStore, TCPStore  # type: ignore[attr-defined]
from torch.utils import _pytree as pytree

from monarch_actor import Actor, current_rank, endpoint
from monarch_actor.extension import process_address

from ._errors import RemoteTensorError

__all__ = ["REDUCTIONS", "Ref", "TensorWorker", "reduce_shard"]

GROUP_TIMEOUT = datetime.timedelta(seconds=300)

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


class Ref:
    """A tensor's number in the processes' tables, inside a command."""

    __slots__ = ("id",)

    def __init__(self, id: int) -> None:
        self.id = id

    def __reduce__(self) -> tuple[Any, ...]:
        return (Ref, (self.id,))

    def __repr__(self) -> str:
        return f"Ref({self.id})"


class _Poison:
    __slots__ = ("error",)

    def __init__(self, error: RemoteTensorError) -> None:
        self.error = error


_seeded = False

# this process's tensors, by reference number (every worker actor here shares it)
TABLE: dict[int, torch.Tensor | _Poison] = {}


def _resolve(tree: Any) -> Any:
    def get(leaf: Any) -> Any:
        if isinstance(leaf, Ref):
            value = TABLE.get(leaf.id)
            if value is None:
                raise RuntimeError(f"tensor {leaf.id} is not here (dropped?)")
            if isinstance(value, _Poison):
                raise value.error
            return value
        return leaf

    return pytree.tree_map(get, tree)


def _call(op: Any, args: Any, kwargs: Any) -> Any:
    if isinstance(op, tuple):  # ("attr", name): a tensor property such as .T
        return getattr(args[0], op[1])
    return op(*args, **kwargs)


def _store(outs: Sequence[int], result: Any) -> None:
    tensors = [leaf for leaf in pytree.tree_leaves(result) if isinstance(leaf, torch.Tensor)]
    if len(tensors) != len(outs):
        raise RuntimeError(
            f"the operation gave {len(tensors)} tensors here but {len(outs)} at the controller"
        )
    for ref, tensor in zip(outs, tensors, strict=True):
        TABLE[ref] = tensor


class _Groups:
    """Process groups of one mesh view, per set of dimensions, made on first use."""

    def __init__(self, host: str, port: int, size: int, is_master: bool) -> None:
        self.store = TCPStore(
            host, port, size, is_master, timeout=GROUP_TIMEOUT, wait_for_workers=False
        )
        self.groups: dict[tuple[str, ...], Any] = {}

    def group(self, dims: tuple[str, ...]) -> Any:
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
        prefix = PrefixStore(f"{'.'.join(dims)}/{rest}/", self.store)
        made = dist.ProcessGroupGloo(prefix, rank, size, GROUP_TIMEOUT)
        self.groups[dims] = made
        return made


def reduce_shard(group: Any, tensor: torch.Tensor, reduction: str, scatter: bool) -> torch.Tensor:
    """This process's result of reducing ``tensor`` over ``group``."""
    size, rank = group.size(), group.rank()
    if reduction == "stack":
        gathered = [torch.empty_like(tensor) for _ in range(size)]
        group.allgather([gathered], [tensor.contiguous()]).wait()
        if scatter:  # all-to-all: element i of each input's first dim goes to rank i
            return torch.stack([part[rank] for part in gathered])
        stacked: torch.Tensor = torch.stack(gathered)
        return stacked
    result = tensor.detach().clone().contiguous()
    options = dist.AllreduceOptions()
    options.reduceOp = REDUCTIONS[reduction]
    group.allreduce([result], options).wait()
    if reduction == "avg":
        result = result / size if result.is_floating_point() else result // size
    if scatter:
        part: torch.Tensor = result.chunk(size)[rank].clone()
        return part
    return result


class TensorWorker(Actor):
    """Runs the controller's tensor commands on this process (one per mesh view)."""

    def __init__(self) -> None:
        self.groups: _Groups | None = None
        global _seeded
        if not _seeded:  # procs forked from one server share its random state
            torch.seed()
            _seeded = True

    @endpoint
    def run(self, batch: list[tuple[Any, ...]]) -> None:
        """Run a batch of commands in order; failures poison their outputs."""
        for command in batch:
            kind = command[0]
            if kind == "op":
                _, op, args, kwargs, outs, where = command
                try:
                    _store(outs, _call(op, *_resolve((args, kwargs))))
                except RemoteTensorError as error:
                    self._poison(outs, error)
                except Exception as error:
                    self._poison(outs, self._error(error, where))
            elif kind == "drop":
                for ref in command[1]:
                    TABLE.pop(ref, None)
            elif kind == "reduce":
                _, source, out, dims, reduction, scatter, inplace, where = command
                try:
                    tensor = _resolve(Ref(source))
                    assert self.groups is not None, "no store: the controller sends one first"
                    result = reduce_shard(self.groups.group(dims), tensor, reduction, scatter)
                    if inplace:
                        tensor.copy_(result)
                        result = tensor
                    TABLE[out] = result
                except RemoteTensorError as error:
                    self._poison([out], error)
                except Exception as error:
                    self._poison([out], self._error(error, where))
            elif kind == "store":
                _, host, port, size = command
                if self.groups is None:
                    self.groups = _Groups(host, port, size, is_master=False)

    @endpoint
    def serve_store(self, size: int) -> tuple[str, int]:
        """Serve the store this mesh's process groups meet at; where it listens."""
        host = _reachable_host()
        self.groups = _Groups(host, 0, size, is_master=True)
        return host, self.groups.store.port

    @endpoint
    def fetch(self, ref: int) -> tuple[bool, Any]:
        """``(True, shard)``: this process's shard of tensor ``ref``, on the
        CPU; ``(False, message)`` if an operation it depends on failed."""
        value = TABLE.get(ref)
        if value is None:
            return False, f"tensor {ref} is not on this process (it was dropped)"
        if isinstance(value, _Poison):
            return False, str(value.error)
        return True, value.detach().cpu()

    def _error(self, error: Exception, where: str) -> RemoteTensorError:
        point = current_rank()
        return RemoteTensorError(
            f"{where} failed on the process at {dict(point)}: {type(error).__name__}: {error}\n"
            + "".join(traceback.format_exception(error)).rstrip()
        )

    def _poison(self, outs: Sequence[int], error: RemoteTensorError) -> None:
        poison = _Poison(error)
        for ref in outs:
            TABLE[ref] = poison


def _reachable_host() -> str:
    """The host part of this process's address (where other processes reach it)."""
    address = process_address() or ""
    scheme, _, rest = address.partition("://")
    if scheme in ("tcp", "tls+tcp") and rest:
        return rest.rpartition(":")[0].strip("[]")
    return socket.gethostbyname("localhost")
