"""Gradients on the mesh: ``grad_generator`` runs backward on every process
and hands out each gradient as soon as autograd makes it there (another
stream can reduce it while backward goes on); ``grad_function`` makes an
autograd function from a forward that returns its own backward."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

from ._active import suspended
from ._tensor import Tensor, dispatch, faking, incorrect, meshes, new_ref, prepare, where

__all__ = ["grad_function", "grad_generator"]


def grad_generator(
    roots: torch.Tensor | Sequence[torch.Tensor] = (),
    with_respect_to: Sequence[torch.Tensor] = (),
    grad_roots: Sequence[torch.Tensor | None] = (),
) -> Iterator[Tensor]:
    """The gradients of ``roots`` with respect to each of ``with_respect_to``.

    The backward pass runs on the processes once; each gradient exists there as
    soon as autograd has made it, so pass the inputs in the order backward makes
    them (last layer first) to reduce each while the rest is computed.

    Args:
        roots: the distributed tensor(s) to differentiate, e.g. the loss.
        with_respect_to: the distributed tensors (requiring grad) to get gradients of.
        grad_roots: one seed gradient per root (``None``: ones); empty: every root
            must then be a scalar.

    Returns:
        An iterator of the gradients, in the order of ``with_respect_to``.

    Raises:
        TypeError: an argument is not a distributed tensor, or a root that is not a
            scalar has no ``grad_roots`` entry.
        ValueError: ``grad_roots`` has the wrong length, or a root or input does not
            require grad.
    """
    root_list: list[Any] = [roots] if isinstance(roots, torch.Tensor) else list(roots)
    inputs: list[Any] = list(with_respect_to)
    seeds: list[Any] = list(grad_roots)
    if seeds and len(seeds) != len(root_list):
        raise ValueError(f"grad_roots has {len(seeds)} entries for {len(root_list)} roots")
    every = [*root_list, *inputs, *(s for s in seeds if s is not None)]
    for tensor in every:
        if not isinstance(tensor, Tensor):
            raise TypeError(
                f"grad_generator() takes distributed tensors, got {type(tensor).__name__}"
            )
    prepared = prepare("grad_generator", (every,), {}, active=False)
    for tensor in inputs:
        if not tensor.requires_grad:
            raise ValueError(f"grad_generator(): {tensor!r} does not require grad")
    for root in root_list:
        if not root.requires_grad:
            raise ValueError(f"grad_generator(): the root {root!r} does not require grad")
        if not seeds and root.numel() != 1:
            raise incorrect(
                f"grad_generator(): root of shape {tuple(root.shape)} needs a grad_roots entry "
                "(grad can be implicitly created only for scalar outputs)"
            )
    mesh, stream = prepared.mesh, prepared.stream
    assert mesh is not None and stream is not None
    outs = [new_ref() for _ in inputs]
    command = (
        "grads",
        [r._ref for r in root_list],
        [w._ref for w in inputs],
        [None if s is None else s._ref for s in seeds],
        outs,
        where("grad_generator"),
    )
    mesh._send(stream.name, command)
    fakes = []
    with faking():
        for tensor in inputs:
            fakes.append(torch.empty_like(tensor._fake, requires_grad=False))
    made = [Tensor(fake, mesh, out, stream) for fake, out in zip(fakes, outs, strict=True)]

    def each() -> Iterator[Tensor]:
        while made:
            yield made.pop(0)

    return each()


class _GradFunction(torch.autograd.Function):
    """An autograd node whose backward is the closure its forward returned."""

    @staticmethod
    def forward(ctx: Any, fn: Callable[..., Any], *args: Any) -> Any:
        result, backward = fn(*args)
        ctx.continuation = backward
        return result

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> Any:
        produced = ctx.continuation(*grads)
        if isinstance(produced, tuple):
            return (None, *produced)
        return None, produced


def grad_function(fn: Callable[..., Any]) -> Callable[..., Any]:
    """An autograd function made from a forward that returns its own backward.

    Under an active mesh it runs on the processes like any torch function.

    Args:
        fn: ``fn(*args) -> (result, backward)``, where ``backward(*grad_outputs)``
            returns the gradients of ``args`` (a tuple, or one tensor for one argument).

    Returns:
        A function of the same arguments that returns ``result`` and records
        ``backward`` for autograd.
    """
    apply = functools.partial(_GradFunction.apply, fn)

    @functools.wraps(fn)
    def call(*args: Any) -> Any:
        if any(isinstance(arg, Tensor) for arg in args) or (meshes and not suspended()):
            return dispatch(apply, args, {})  # one operation: forward runs on the processes
        return apply(*args)

    return call
