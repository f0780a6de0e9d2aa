"""The operations every mesh shares (host, proc, actor and value meshes):
slicing by named dimensions and reshaping, all on the mesh's ``Shape``."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Self

from monarch_mesh import Extent, Shape

__all__ = ["MeshOps"]


class MeshOps(ABC):
    """The operations every mesh shares: sizes, slicing and reshaping by named dimensions.

    Host, proc, actor and value meshes derive from it, and so may a sibling
    package's mesh: a subclass keeps its ``Shape`` in ``_shape`` and
    implements ``_new_with_shape`` (the same mesh over another shape). Each
    operation returns a new mesh of the same kind over the same members.
    """

    _shape: Shape

    @abstractmethod
    def _new_with_shape(self, shape: Shape) -> Self:
        """The same mesh restricted or reshaped to ``shape``."""

    @property
    def extent(self) -> Extent:
        """The mesh's dimensions and their sizes."""
        return self._shape.extent

    @property
    def sizes(self) -> dict[str, int]:
        """The size of each dimension, by name, in order."""
        return dict(self._shape.extent)

    def size(self, dim: str | Sequence[str] | None = None) -> int:
        """All elements, or the size of one dimension, or the product over several.

        Args:
            dim: a dimension's name, several names, or ``None`` for the whole mesh.

        Raises:
            KeyError: the mesh has no dimension of that name.
        """
        if dim is None:
            return len(self._shape)
        sizes = self.sizes
        total = 1
        for label in [dim] if isinstance(dim, str) else dim:
            if label not in sizes:
                raise KeyError(f"mesh has no dimension {label!r} (its dimensions: {list(sizes)})")
            total *= sizes[label]
        return total

    def __len__(self) -> int:
        return len(self._shape)

    def slice(self, **kwargs: int | slice) -> Self:
        """Select along named dimensions: an int picks one index and drops the
        dimension, a Python slice keeps it, restricted."""
        return self._new_with_shape(self._shape.index(**kwargs))

    def flatten(self, name: str) -> Self:
        """The same members along one dimension ``name``, in row-major order.

        Args:
            name: the name of the single dimension.

        Raises:
            SliceError: the ranks are not evenly spaced (a ``ValueError``).
        """
        return self._new_with_shape(self._shape.flatten(name))

    def rename(self, **names: str) -> Self:
        """Rename dimensions, ``old="new"``; the others keep their names."""
        return self._new_with_shape(self._shape.rename(**names))

    def split(self, **spec: Sequence[str] | int) -> Self:
        """Split dimensions into several, row-major.

        ``mesh.split(hosts=("dp", "pp"), pp=2)``: a key naming a dimension maps
        to the names that replace it; any other key is a new dimension with its
        size. Per split, at most one size may be left out; it is inferred.
        """
        return self._new_with_shape(self._shape.split(**spec))
