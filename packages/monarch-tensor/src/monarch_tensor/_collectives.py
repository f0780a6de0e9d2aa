"""The module-level collectives: ``reduce``, ``reduce_``, ``to_mesh`` and
``slice_mesh`` over every distributed tensor of a pytree."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch.utils import _pytree as pytree

from ._tensor import MeshSliceTensor, Stream, Tensor

__all__ = ["reduce", "reduce_", "slice_mesh", "to_mesh"]


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
            t._mesh._reduce(t, dims, reduction, scatter, mesh, _inplace)
            if isinstance(t, Tensor)
            else t
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


def to_mesh(tensors: Any, mesh: Any, stream: Stream | None = None) -> Any:
    """``Tensor.to_mesh`` over every distributed tensor (or mesh slice) of a pytree."""
    return pytree.tree_map(
        lambda t: t.to_mesh(mesh, stream) if isinstance(t, Tensor | MeshSliceTensor) else t,
        tensors,
        is_leaf=lambda t: isinstance(t, MeshSliceTensor),
    )


def slice_mesh(tensors: Any, **coords: int) -> Any:
    """``Tensor.slice_mesh`` over every distributed tensor of a pytree."""
    return pytree.tree_map(
        lambda t: t.slice_mesh(**coords) if isinstance(t, Tensor) else t, tensors
    )
