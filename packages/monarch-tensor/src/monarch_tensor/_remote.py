"""Functions and actor endpoints that run on every process of a mesh:
``remote(fn)`` (its result is distributed tensors, or values through the
endpoint adverbs), ``call_on_shard_and_fetch``, the ``rref`` adverb of actor
endpoints, and distributed tensors as endpoint arguments (each actor gets
its own process's shard)."""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch.utils import _pytree as pytree

from monarch_actor import ActorEndpoint, ActorMesh, Future
from monarch_actor.extension import (
    actor_mesh_name,
    actor_procs,
    call_and_keep,
    endpoint_mesh,
    mesh_shape,
    proc_mesh_id,
    transform_arguments,
)

from ._active import suspended
from ._fetch import coordinates
from ._mesh import activation, device_mesh
from ._table import Shard
from ._tensor import (
    Prepared,
    Tensor,
    TensorMesh,
    emit,
    faking,
    get_active_stream,
    incorrect,
    meshes,
    new_ref,
    prepare,
    run_fake,
)
from ._worker import Meta, Op

__all__ = ["Remote", "call_on_shard_and_fetch", "remote", "rref"]

_MODES = ("cached", "inspect", "mocked")
_NEEDS_MESH = (
    "Calling a 'remote' monarch function requires an active proc_mesh "
    "(`with proc_mesh.activate():`)"
)


class Remote:
    """A function that runs on every process of the active mesh.
    ``f(*args)`` (or ``f.rref(*args)``) returns its results as distributed
    tensors at once; ``call``, ``call_one``, ``choose``, ``stream`` and
    ``broadcast`` run it as an actor endpoint would and return its values.

    ``propagate`` says what ``f(*args)`` returns without running it here: a
    callable given the arguments' fake tensors; ``"cached"`` (the default:
    run once on the first process, on copies of its shards, per argument
    shapes); ``"mocked"`` (the function itself on fake tensors, here);
    ``"inspect"`` (it returns no tensors: ``f(*args)`` is ``None``).

    Args:
        function: the function, or its ``"package.module.name"`` (imported on each
            process when called).
        propagate: how to know the results without running here (see above);
            ``None`` is ``"cached"``.

    Raises:
        TypeError: ``function`` is neither callable nor a string.
        ValueError: ``propagate`` is none of the accepted values.
    """

    def __init__(self, function: Callable[..., Any] | str, propagate: Any = None) -> None:
        if isinstance(function, str):
            # by its path: imported where it runs
            self._op: Op = ("path", function)
            self._name = function
        elif callable(function):
            self._op = function
            self._name = getattr(function, "__qualname__", repr(function))
            functools.update_wrapper(self, function)
        else:
            raise TypeError(
                f"remote() takes a function or its 'package.module.name', got "
                f"{type(function).__name__}"
            )
        if not (propagate is None or callable(propagate) or propagate in _MODES):
            raise ValueError(
                f"propagate={propagate!r}: give a function of the arguments' fake tensors, or "
                f"one of {_MODES}"
            )
        self._propagate = propagate
        self._cache: dict[tuple[object, ...], Any] = {}  # signature -> described results

    def _function(self) -> Callable[..., Any]:
        if isinstance(self._op, tuple):
            module, _, name = self._op[1].rpartition(".")
            found: Callable[..., Any] = getattr(importlib.import_module(module), name)
            return found
        return self._op

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.rref(*args, **kwargs)

    def rref(self, *args: Any, **kwargs: Any) -> Any:
        """The function's results as distributed tensors, without waiting."""
        prepared = prepare(self._name, args, kwargs)
        if prepared.mesh is None:
            raise ValueError(_NEEDS_MESH)
        result = self._propagated(prepared)
        return emit(self._op, self._name, prepared, result, fresh=True)

    def _propagated(self, prepared: Prepared) -> Any:
        propagate = self._propagate
        if propagate == "inspect":
            return None
        if propagate == "mocked":
            return run_fake(self._name, self._function(), *_fakes(prepared))
        if callable(propagate):
            return run_fake(self._name, propagate, *_fakes(prepared))
        key = _signature(prepared)
        described = self._cache.get(key)
        if described is None:
            mesh = prepared.mesh
            assert mesh is not None
            mesh.flush()
            first = mesh._peers.slice(**{name: 0 for name in mesh.names})
            described = first.propagate.call_one(self._op, *prepared.sent).get()
            self._cache[key] = described
        return pytree.tree_map(
            lambda leaf: _fake_of(leaf) if isinstance(leaf, Meta) else leaf, described
        )

    # -- as an endpoint ----------------------------------------------------------------

    def _endpoint(self, how: str, args: Any, kwargs: Any) -> tuple[Any, Prepared]:
        if not meshes or suspended():
            if how == "broadcast":
                raise incorrect(f"{self._name}.broadcast() needs an active mesh")
            raise ValueError(_NEEDS_MESH)
        prepared = prepare(self._name, args, kwargs)
        mesh = prepared.mesh
        assert mesh is not None and prepared.stream is not None
        mesh.flush()
        return mesh._worker(prepared.stream.name).call, prepared

    def call(self, *args: Any, **kwargs: Any) -> Future[Any]:
        """Run on every process; a ``Future`` of the ``ValueMesh`` of results."""
        endpoint, prepared = self._endpoint("call", args, kwargs)
        result: Future[Any] = endpoint.call(self._op, *prepared.sent)
        return result

    def call_one(self, *args: Any, **kwargs: Any) -> Future[Any]:
        """Run on the only process of the active mesh; a ``Future`` of the result."""
        endpoint, prepared = self._endpoint("call_one", args, kwargs)
        result: Future[Any] = endpoint.call_one(self._op, *prepared.sent)
        return result

    def choose(self, *args: Any, **kwargs: Any) -> Future[Any]:
        """Run on one process of the active mesh; a ``Future`` of its result."""
        endpoint, prepared = self._endpoint("choose", args, kwargs)
        result: Future[Any] = endpoint.choose(self._op, *prepared.sent)
        return result

    def stream(self, *args: Any, **kwargs: Any) -> Iterator[Future[Any]]:
        """Run on every process; a ``Future`` per result, as each arrives."""
        endpoint, prepared = self._endpoint("stream", args, kwargs)
        results: Iterator[Future[Any]] = endpoint.stream(self._op, *prepared.sent)
        return results

    def _send_target(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
        """What ``monarch.actor.send(this, args, kwargs, port)`` sends: the
        workers' endpoint, with this function and its arguments."""
        endpoint, prepared = self._endpoint("send", args, kwargs)
        return endpoint, (self._op, *prepared.sent), {}

    def broadcast(self, *args: Any, **kwargs: Any) -> None:
        """Run on every process, for its effect."""
        endpoint, prepared = self._endpoint("broadcast", args, kwargs)
        endpoint.broadcast(self._op, *prepared.sent)

    def __repr__(self) -> str:
        return f"<remote {self._name}>"


def remote(function: Any = None, *, propagate: Any = None) -> Any:
    """``remote(fn)``, ``remote("pkg.mod.fn")``, ``@remote`` or
    ``@remote(propagate=...)``: a ``Remote`` function.

    Args:
        function: the function or its ``"package.module.name"``; ``None`` (as in
            ``@remote(propagate=...)``) returns a decorator.
        propagate: how the results are known without running here, as for ``Remote``.

    Returns:
        The ``Remote`` function, or a decorator that makes one.
    """
    if function is None:
        return functools.partial(remote, propagate=propagate)
    return Remote(function, propagate)


def call_on_shard_and_fetch(
    function: Remote, *args: Any, shard: dict[str, int] | None = None, **kwargs: Any
) -> Future[Any]:
    """Run ``function`` on one process and fetch its result.

    The process is one of the mesh of the distributed tensor arguments (or of
    the active mesh); each tensor argument arrives there as that process's shard.

    Args:
        function: a ``remote`` function.
        *args: its positional arguments.
        shard: the process, as ``{dimension: index}`` for every dimension of the
            mesh; ``None``: the first process.
        **kwargs: its keyword arguments.

    Returns:
        A ``Future`` of the function's result on that process.

    Raises:
        TypeError: ``function`` is not a ``Remote``.
        ValueError: no mesh is active and no argument is a distributed tensor, or
            ``shard`` leaves out a dimension.
        KeyError: ``shard`` names a dimension the mesh does not have.
        IndexError: an index of ``shard`` is outside its dimension.
    """
    if not isinstance(function, Remote):
        raise TypeError(
            f"call_on_shard_and_fetch() takes a remote() function, got {type(function).__name__}"
        )
    prepared = prepare(function._name, args, kwargs)
    mesh = prepared.mesh
    if mesh is None:
        raise ValueError(_NEEDS_MESH)
    assert prepared.stream is not None
    at = coordinates(mesh, shard, {})
    mesh.flush()
    worker = mesh._worker(prepared.stream.name).slice(**at)
    result: Future[Any] = worker.call.call_one(function._op, *prepared.sent)
    return result


def rref(endpoint: ActorEndpoint[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The ``rref`` extension: call an actor endpoint on every process of the
    active mesh; each actor's result stays on its process as its shard."""
    name = f"{endpoint!r}.rref()"
    if suspended():
        raise incorrect(f"{name} needs an active mesh (`with proc_mesh.activate():`)")
    if not meshes:
        # as in Monarch, no activation is needed: the mesh of the distributed
        # tensors passed, else that of the actors' processes
        passed = [x.mesh for x in pytree.tree_leaves((args, kwargs)) if isinstance(x, Tensor)]
        implied = passed[0] if passed else device_mesh(actor_procs(endpoint_mesh(endpoint)))
        with activation(implied):
            return rref(endpoint, args, kwargs)
    propagate = endpoint.propagate
    if not (callable(propagate) or propagate == "inspect"):
        raise ValueError(
            f"{name} needs to know its results' shapes without running: declare the endpoint "
            "with @endpoint(propagate=lambda *args: ...), a function of the arguments' fake "
            "tensors (or propagate='inspect' if it returns no tensors)"
        )
    prepared = prepare(name, args, kwargs)
    mesh = prepared.mesh
    assert mesh is not None  # a mesh is active
    stream = prepared.stream or get_active_stream()
    _check_same_processes(endpoint_mesh(endpoint), mesh, name)
    result = None if propagate == "inspect" else run_fake(name, propagate, *_fakes(prepared))
    leaves, spec = pytree.tree_flatten(result)
    outs: list[int] = []
    made: list[Any] = []
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            ref = new_ref()
            outs.append(ref)
            made.append(Tensor(_fake_of(Meta(leaf)), mesh, ref, stream))
        else:
            made.append(leaf)
    mesh.flush()
    call_and_keep(endpoint, args, kwargs, outs)
    return pytree.tree_unflatten(made, spec)


def _check_same_processes(actors: ActorMesh[Any], mesh: TensorMesh, name: str) -> None:
    ranks = set(mesh_shape(actors).ndslice)
    same = proc_mesh_id(actor_procs(actors)) == proc_mesh_id(mesh._procs)
    if not same or not ranks <= set(mesh_shape(mesh._procs).ndslice):
        raise incorrect(
            f"WRONG_MESH: {name}: the actors are not on the processes of {mesh!r} (spawn them "
            "on the proc mesh you activated)"
        )


def _fakes(prepared: Prepared) -> tuple[Sequence[Any], dict[str, Any]]:
    return prepared.fake_args, prepared.fake_kwargs


def _fake_of(meta: Meta) -> torch.Tensor:
    with faking():
        fake = torch.empty_strided(
            meta.shape, meta.stride, dtype=meta.dtype, device=torch.device(meta.device)
        )
    return fake.requires_grad_(meta.requires_grad)


def _signature(prepared: Prepared) -> tuple[object, ...]:
    """What a cached propagation depends on: the arguments' structure, each
    tensor's metadata, and the other values (by type when unhashable)."""
    leaves, spec = pytree.tree_flatten((prepared.fake_args, prepared.fake_kwargs))
    key: list[object] = [str(spec)]
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            key.append((tuple(leaf.shape), leaf.stride(), leaf.dtype, leaf.requires_grad))
        else:
            try:
                hash(leaf)
                key.append((type(leaf), leaf))
            except TypeError:
                key.append(type(leaf))
    return tuple(key)


def _shards(
    actors: ActorMesh[Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Distributed tensor arguments of an endpoint call, or of a spawn (the
    actors' constructor arguments), become references to each receiving
    process's shard, lent in stream order: the actor may read it after the
    tensor was freed (a temporary, gone as soon as the message is sent)."""
    if not any(isinstance(a, Tensor | list | tuple | dict) for a in (*args, *kwargs.values())):
        return args, kwargs
    leaves, spec = pytree.tree_flatten((args, kwargs))
    tensors = [leaf for leaf in leaves if isinstance(leaf, Tensor)]
    if not tensors:
        return args, kwargs
    for tensor in tensors:  # all checked before any is lent
        if tensor._ref < 0:
            raise incorrect("a tensor was sent to an endpoint after drop()")
        _check_same_processes(actors, tensor._mesh, f"actor mesh {actor_mesh_name(actors)}")
    sent = []
    for leaf in leaves:
        if isinstance(leaf, Tensor):
            lent = new_ref()
            ranks = _receivers(actors, leaf._mesh)
            leaf._mesh._send(leaf._stream.name, ("lend", leaf._ref, lent, ranks))
            sent.append(Shard(lent))
        else:
            sent.append(leaf)
    for mesh in {id(tensor._mesh): tensor._mesh for tensor in tensors}.values():
        mesh.flush()
    transformed: tuple[tuple[Any, ...], dict[str, Any]] = pytree.tree_unflatten(sent, spec)
    return transformed


def _receivers(actors: ActorMesh[Any], mesh: TensorMesh) -> frozenset[int] | None:
    """The ranks of ``mesh`` whose processes hold one of ``actors`` (None: all)."""
    ranks = list(mesh_shape(mesh._procs).ndslice)
    called = set(mesh_shape(actors).ndslice)
    if called == set(ranks):
        return None
    return frozenset(i for i, rank in enumerate(ranks) if rank in called)


transform_arguments(_shards)
