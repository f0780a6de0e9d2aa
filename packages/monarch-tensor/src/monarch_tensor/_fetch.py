"""Bringing shards to the controller: ``fetch_shard``, ``inspect``, ``show``."""

from __future__ import annotations

import concurrent.futures
import functools
import threading
from typing import Any

from torch.utils import _pytree as pytree

from monarch_actor import Future
from monarch_actor.extension import future_from

from ._errors import RemoteTensorError
from ._tensor import Tensor, TensorMesh, incorrect

__all__ = ["coordinates", "fetch_shard", "inspect", "show"]


def coordinates(
    mesh: TensorMesh, shard: dict[str, int] | None, coords: dict[str, int]
) -> dict[str, int]:
    """The process of ``mesh`` at ``shard``/``coords`` (none: the first)."""
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
    """A ``Future`` of ``obj`` with each distributed tensor replaced by one shard.

    Pending operations are sent first; the shard comes back as a CPU tensor.

    Args:
        obj: any pytree; leaves that are not distributed tensors are kept as they are.
        shard: the process to fetch from, as ``{dimension: index}`` for every
            dimension of the mesh (merged with ``coords``); none: the first process.
        **coords: the same coordinates as keyword arguments, e.g. ``host=0, gpu=1``.

    Returns:
        A ``Future`` of the pytree; ``get()`` raises ``RemoteTensorError`` if an
        operation that a fetched tensor depends on failed on that process.

    Raises:
        TypeError: a tensor of ``obj`` was dropped.
        KeyError: a coordinate names a dimension the mesh does not have.
        ValueError: some dimension of the mesh was given no index.
        IndexError: an index is outside its dimension.
    """
    leaves, spec = pytree.tree_flatten(obj)
    asked: list[tuple[int, Future[Any]]] = []
    for index, leaf in enumerate(leaves):
        if isinstance(leaf, Tensor):
            if leaf._ref < 0:
                raise incorrect("fetch_shard() of a tensor after drop()")
            mesh = leaf._mesh
            at = coordinates(mesh, shard, coords)
            mesh.flush()
            worker = mesh._worker(leaf._stream.name).slice(**at)
            asked.append((index, worker.fetch.call_one(leaf._ref)))

    return _gathered(leaves, spec, asked)


def _gathered(leaves: list[Any], spec: Any, asked: list[tuple[int, Future[Any]]]) -> Future[Any]:
    """A ``Future`` of the pytree once every asked shard has arrived (by
    callbacks: no event loop per fetch)."""
    done: concurrent.futures.Future[Any] = concurrent.futures.Future()
    values = list(leaves)
    left = [len(asked)]
    lock = threading.Lock()

    def arrived(index: int, future: Future[Any]) -> None:
        try:
            ok, value = future.get()
        except BaseException as error:
            with lock:
                if not done.done():
                    done.set_exception(error)
            return
        with lock:
            if done.done():
                return
            if not ok:
                done.set_exception(RemoteTensorError(value))
                return
            values[index] = value
            left[0] -= 1
            if not left[0]:
                done.set_result(pytree.tree_unflatten(values, spec))

    if not asked:
        done.set_result(pytree.tree_unflatten(values, spec))
    for index, future in asked:
        future.add_done_callback(functools.partial(arrived, index))
    return future_from(done)


def inspect(obj: Any, shard: dict[str, int] | None = None, **coords: int) -> Any:
    """``fetch_shard(obj, shard, **coords).get()``: the shard, waiting for it.

    Args:
        obj: any pytree holding distributed tensors.
        shard: the process to fetch from, as ``{dimension: index}``; none: the first.
        **coords: the same coordinates as keyword arguments.

    Returns:
        ``obj`` with each distributed tensor replaced by its shard, as a CPU tensor.

    Raises:
        RemoteTensorError: an operation the fetched tensors depend on failed there.
    """
    return fetch_shard(obj, shard, **coords).get()


def show(obj: Any, shard: dict[str, int] | None = None, **coords: int) -> None:
    """Display a shard: with ``torchshow`` when it is installed, else printed.

    Args:
        obj: any pytree holding distributed tensors.
        shard: the process to fetch from, as ``{dimension: index}``; none: the first.
        **coords: the same coordinates as keyword arguments.
    """
    value = inspect(obj, shard, **coords)
    try:
        import torchshow  # type: ignore[import-not-found]
    except ImportError:
        print(value)  # noqa: T201 (show() displays; without torchshow, printing is how)
    else:
        torchshow.show(value)
