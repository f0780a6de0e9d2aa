"""The module-level collectives: ``reduce``, ``reduce_``, ``to_mesh`` and
``slice_mesh`` over every distributed tensor of a pytree."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from torch.utils import _pytree as pytree

from ._tensor import MeshSliceTensor, Stream, Tensor

if TYPE_CHECKING:
    from monarch_actor import ProcMesh

    from ._mesh import DeviceMesh

__all__ = ["reduce", "reduce_", "slice_mesh", "to_mesh"]


def reduce(
    tensors: Any,
    dims: str | Sequence[str] = (),
    reduction: str = "sum",
    scatter: bool = False,
    mesh: object = None,
    _inplace: bool = False,
) -> Any:
    """``Tensor.reduce`` over every distributed tensor of a pytree.

    Args:
        tensors: a pytree (tensor, list, tuple, dict, ...); leaves that are not
            distributed tensors are returned unchanged.
        dims: the mesh dimension(s) to reduce across; empty: every dimension.
        reduction: ``sum``, ``avg``, ``product``, ``min``, ``max``, ``band``,
            ``bor``, ``bxor`` or ``stack`` (all-gather along a new outer dimension).
        scatter: keep only this process's part of the result along dimension 0
            (reduce-scatter; with ``stack``: all-to-all). Needs exactly one dimension.
        mesh: only ``None`` is supported: each tensor reduces on its own mesh.
        _inplace: write each result into its input (what ``reduce_`` does).

    Returns:
        The pytree with each distributed tensor replaced by its reduced tensor.

    Raises:
        TypeError: ``mesh`` was given, or a tensor cannot be used on the active stream.
        KeyError: a name in ``dims`` is not a dimension of a tensor's mesh.
        ValueError: an unknown reduction, a repeated dimension, several dimensions with
            ``stack`` or ``scatter``, a tensor that requires grad, or a shape that
            ``scatter`` cannot split (or that ``_inplace`` would change).
    """
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
    mesh: object = None,
) -> Any:
    """``Tensor.reduce_`` over every distributed tensor of a pytree.

    Args:
        tensors: a pytree; leaves that are not distributed tensors are left alone.
        dims: the mesh dimension(s) to reduce across; empty: every dimension.
        reduction: the reduction, as for ``reduce``; it must keep each tensor's shape.
        scatter: as for ``reduce`` (only where the shape stays the same).
        mesh: only ``None`` is supported: each tensor reduces on its own mesh.

    Returns:
        The pytree, holding the same (now reduced) distributed tensors.

    Raises:
        ValueError: the reduction would change a tensor's shape (use ``reduce``), or
            any error of ``reduce``.
    """
    return reduce(tensors, dims, reduction, scatter, mesh, True)


def to_mesh(tensors: Any, mesh: DeviceMesh | ProcMesh, stream: Stream | None = None) -> Any:
    """``Tensor.to_mesh`` over every distributed tensor (or mesh slice) of a pytree.

    Args:
        tensors: a pytree whose ``Tensor`` and ``MeshSliceTensor`` leaves are moved;
            other leaves are returned unchanged.
        mesh: the destination ``DeviceMesh`` (or a ``ProcMesh``).
        stream: the stream the moved tensors belong to there; ``None``: the active one.

    Returns:
        The pytree with each distributed tensor replaced by its copy on ``mesh``.
    """
    return pytree.tree_map(
        lambda t: t.to_mesh(mesh, stream) if isinstance(t, Tensor | MeshSliceTensor) else t,
        tensors,
        is_leaf=lambda t: isinstance(t, MeshSliceTensor),
    )


def slice_mesh(tensors: Any, **coords: int) -> Any:
    """``Tensor.slice_mesh`` over every distributed tensor of a pytree.

    Args:
        tensors: a pytree; leaves that are not distributed tensors are left alone.
        **coords: the index to keep along some mesh dimensions, e.g. ``stage=0``.

    Returns:
        The pytree with each distributed tensor replaced by its ``MeshSliceTensor``.
    """
    return pytree.tree_map(
        lambda t: t.slice_mesh(**coords) if isinstance(t, Tensor) else t, tensors
    )
