"""Gradients one at a time (Monarch's ``monarch.gradient``):
``GradientGenerator`` runs one backward pass over plain torch tensors and
yields the gradient of each input in the order asked for. On a mesh,
``grad_generator`` does the same for distributed tensors.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.autograd.graph import GradientEdge

__all__ = ["GradientGenerator"]


class GradientGenerator:
    """An iterator over the gradients of ``roots_list`` with respect to each of
    ``with_respect_to``, in that order: ``None`` for an input the roots do not
    depend on. The backward pass runs once, at the first ``next()``; the
    graph is not kept afterwards.

    Args:
        roots_list: the tensors (or gradient edges) to differentiate.
        with_respect_to: the tensors (or gradient edges) to get gradients of.
        grad_roots: one seed gradient per root (``None``: ones, for a scalar
            root); empty: every root is a scalar.
        context_restorer: ``None``, or a function of no arguments returning the
            context manager the backward pass runs in (a mesh and stream to
            restore, say).

    Raises:
        ValueError: ``grad_roots`` has another length than ``roots_list``.

    Examples:
        >>> import torch
        >>> x = torch.ones(2, requires_grad=True)
        >>> [g.tolist() for g in GradientGenerator([(x * 3).sum()], [x])]
        [[3.0, 3.0]]
    """

    def __init__(
        self,
        roots_list: Sequence[torch.Tensor | GradientEdge],
        with_respect_to: Sequence[torch.Tensor | GradientEdge],
        grad_roots: Sequence[torch.Tensor | None] = (),
        context_restorer: Callable[[], Any] | None = None,
    ) -> None:
        self._roots = list(roots_list)
        self._inputs = list(with_respect_to)
        self._seeds = list(grad_roots)
        if self._seeds and len(self._seeds) != len(self._roots):
            raise ValueError(
                f"grad_roots has {len(self._seeds)} entries for {len(self._roots)} roots"
            )
        self._restore = context_restorer
        self._grads: list[torch.Tensor | None] | None = None
        self._next = 0

    def _backward(self) -> list[torch.Tensor | None]:
        wanted = [
            (i, x)
            for i, x in enumerate(self._inputs)
            if isinstance(x, GradientEdge) or x.requires_grad
        ]
        grads: list[torch.Tensor | None] = [None] * len(self._inputs)
        if not wanted or not self._roots:
            return grads
        context = self._restore() if self._restore is not None else contextlib.nullcontext()
        with context:
            roots: Any = self._roots  # tensors and edges mixed, which torch accepts
            inputs: Any = [x for _, x in wanted]
            found = torch.autograd.grad(
                roots,
                inputs,
                self._seeds or None,
                allow_unused=True,
            )
        for (i, _), grad in zip(wanted, found, strict=True):
            grads[i] = grad
        return grads

    def __iter__(self) -> GradientGenerator:
        return self

    def __next__(self) -> torch.Tensor | None:
        if self._grads is None:
            self._grads = self._backward()
        if self._next >= len(self._grads):
            raise StopIteration
        grad = self._grads[self._next]
        self._grads[self._next] = None  # the caller holds it now
        self._next += 1
        return grad
