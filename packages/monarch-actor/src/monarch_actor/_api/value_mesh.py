"""``ValueMesh``: one value per rank of the mesh a ``call()`` went to."""

from __future__ import annotations

import pprint
from collections.abc import Iterator, Sequence
from typing import Any, Generic, TypeVar

from monarch_mesh import Point, Shape, Slice

from .mesh_ops import MeshOps

__all__ = ["ValueMesh"]
__test__ = {"Slice": Slice}  # the doctest builds shapes from slices

R = TypeVar("R")


class ValueMesh(MeshOps, Generic[R]):
    """Values laid out on a mesh, in row-major rank order.

    What ``call()`` resolves to: one reply per actor, with the extent of the
    mesh it was sent to. It slices and reshapes like any mesh.

    Args:
        shape: the mesh's shape.
        values: one value per rank of ``shape``, in row-major order.

    Raises:
        ValueError: there are not as many values as ranks.

    Examples:
        >>> vm = ValueMesh(Shape(["gpus"], Slice.new_row_major([3])), [5, 6, 7])
        >>> vm.values(), vm.item(gpus=1), vm.slice(gpus=slice(1, None)).values()
        ([5, 6, 7], 6, [6, 7])
    """

    def __class_getitem__(cls, item: Any) -> Any:
        # ``ValueMesh[int]`` is the class itself at run time, as in Monarch, so
        # ``isinstance(x, ValueMesh[int])`` and ``type(vm) is ValueMesh[int]`` hold;
        # type checkers still read the parameter.
        return cls

    def __init__(self, shape: Shape, values: Sequence[R]) -> None:
        if len(values) != len(shape):
            raise ValueError(
                f"invalid value mesh: expected {len(shape)} ranks, but contains {len(values)} ranks"
            )
        base = shape.ndslice
        self._shape = shape
        # values indexed by the shape's own ranks, so slices can share them
        self._by_rank = dict(zip(base, values, strict=True))

    @classmethod
    def _row_major(cls, shape: Shape, values: list[R]) -> ValueMesh[R]:
        """``ValueMesh(shape, values)`` for a ``shape`` whose ranks are 0 to
        n-1 in row-major order, with one value per rank (a call's replies,
        which its gatherer counts), without walking it."""
        mesh: ValueMesh[R] = cls.__new__(cls)
        mesh._shape, mesh._by_rank = shape, dict(enumerate(values))
        return mesh

    def _new_with_shape(self, shape: Shape) -> ValueMesh[R]:
        mesh: ValueMesh[R] = ValueMesh.__new__(ValueMesh)
        mesh._shape, mesh._by_rank = shape, self._by_rank
        return mesh

    def values(self) -> list[R]:
        """Every value, in row-major order."""
        return [self._by_rank[rank] for rank in self._shape.ndslice]

    def items(self) -> Iterator[tuple[Point, R]]:
        """Every ``(point, value)`` pair, in row-major order; iterating the mesh gives the same."""
        extent = self._shape.extent
        for position, rank in enumerate(self._shape.ndslice):
            yield Point(position, extent), self._by_rank[rank]

    def __iter__(self) -> Iterator[tuple[Point, R]]:
        return self.items()

    def get(self, index: int) -> R:
        """The value at row-major position ``index``.

        Args:
            index: a position from 0 to ``len(mesh) - 1``.
        """
        return self._by_rank[self._shape.ndslice[index]]

    def item(self, **coords: int) -> R:
        """The value at the given coordinates, one per dimension: ``vm.item(gpus=1)``.

        Raises:
            KeyError: a dimension is missing or unknown.
        """
        labels = self._shape.labels
        for label in coords:
            if label not in labels:
                raise KeyError(label)
        for label in labels:
            if label not in coords:
                raise KeyError(label)
        return self._by_rank[self._shape.location(**coords)]

    def __getitem__(self, point: Point | dict[str, int]) -> R:
        """An extension over Monarch: ``vm[point]`` for a ``Point`` or a dict."""
        if not isinstance(point, Point | dict):
            raise TypeError(f"index a ValueMesh with a Point or a dict, not {type(point).__name__}")
        return self.item(**dict(point))

    def __repr__(self) -> str:
        body = pprint.pformat(tuple(self.items()))
        return f"ValueMesh({self._shape.extent}):\n" + "\n".join(
            "  " + line for line in body.splitlines()
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (ValueMesh, (self._shape, self.values()))
