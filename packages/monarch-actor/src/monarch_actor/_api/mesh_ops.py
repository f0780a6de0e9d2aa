"""The operations every mesh shares (host, proc, actor and value meshes):
slicing by named dimensions and reshaping, all on the mesh's ``Shape``."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Self

from monarch_mesh import Extent, Shape

__all__ = ["MeshOps"]


class MeshOps(ABC):
    _shape: Shape

    @abstractmethod
    def _new_with_shape(self, shape: Shape) -> Self:
        """The same mesh restricted or reshaped to ``shape``."""

    @property
    def extent(self) -> Extent:
        return self._shape.extent

    @property
    def sizes(self) -> dict[str, int]:
        return dict(self._shape.extent)

    def size(self, dim: str | Sequence[str] | None = None) -> int:
        """All elements, or the size of one dimension, or the product over several."""
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
        return self._new_with_shape(self._shape.flatten(name))

    def rename(self, **names: str) -> Self:
        return self._new_with_shape(self._shape.rename(**names))

    def split(self, **spec: Sequence[str] | int) -> Self:
        return self._new_with_shape(self._shape.split(**spec))
