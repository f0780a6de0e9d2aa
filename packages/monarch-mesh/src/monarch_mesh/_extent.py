"""Named sizes (``Extent``) and coordinates within them (``Point``)."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from math import prod
from typing import TYPE_CHECKING, Any

from ._errors import DimensionNotFoundError, MeshIndexError, SliceError

if TYPE_CHECKING:
    from ._shape import Shape

__all__ = ["Extent", "Point"]


def check_labels(labels: Sequence[str]) -> tuple[str, ...]:
    """Labels as a tuple; each a non-empty str, none repeated."""
    if isinstance(labels, str):
        raise SliceError(f"labels must be a sequence of str, not the str {labels!r}")
    out = tuple(labels)
    for label in out:
        if not isinstance(label, str) or not label:
            raise SliceError(f"every label must be a non-empty str, got {label!r}")
    if len(set(out)) != len(out):
        dup = next(label for label in out if out.count(label) > 1)
        raise SliceError(f"label {dup!r} appears more than once in {list(out)}")
    return out


def missing_dimension(label: object, labels: Sequence[str]) -> DimensionNotFoundError:
    known = ", ".join(labels) if labels else "none"
    return DimensionNotFoundError(f"Dimension {label!r} not found (dimensions: {known})", label)


def _bare(label: str) -> str:
    """A label as Monarch prints it in an extent: bare if it is a plain word."""
    if _WORD.fullmatch(label):
        return label
    return '"' + label.replace("\\", "\\\\").replace('"', '\\"') + '"'


_WORD = re.compile(r"[A-Za-z0-9_]*")


class Extent(Mapping[str, int]):
    """An ordered, read-only mapping from dimension label to size.

    >>> ext = Extent(["hosts", "gpus"], [2, 4])
    >>> ext, ext["gpus"], ext.nelements
    ({hosts: 2, gpus: 4}, 4, 8)
    """

    __slots__ = ("_labels", "_sizes")

    def __init__(self, labels: Sequence[str], sizes: Sequence[int]) -> None:
        self._labels = check_labels(labels)
        self._sizes = tuple(sizes)
        if len(self._labels) != len(self._sizes):
            raise SliceError(
                f"got {len(self._labels)} labels but {len(self._sizes)} sizes: "
                f"{list(self._labels)} vs {list(self._sizes)}"
            )
        for label, size in zip(self._labels, self._sizes, strict=True):
            if isinstance(size, bool) or not isinstance(size, int) or size < 0:
                raise SliceError(f"size of {label!r} must be an int >= 0, got {size!r}")

    @property
    def labels(self) -> list[str]:
        return list(self._labels)

    @property
    def sizes(self) -> list[int]:
        return list(self._sizes)

    @property
    def nelements(self) -> int:
        return prod(self._sizes)

    @property
    def region(self) -> Shape:
        """The dense row-major shape with these labels and sizes."""
        from ._shape import Shape
        from ._slice import Slice

        return Shape(self._labels, Slice.new_row_major(self._sizes))

    def point(self, rank: int) -> Point:
        """The point at row-major ``rank``."""
        return Point(rank, self)

    def __getitem__(self, label: str) -> int:
        try:
            return self._sizes[self._labels.index(label)]
        except ValueError:
            raise missing_dimension(label, self._labels) from None

    def __contains__(self, label: object) -> bool:
        return label in self._labels

    def __iter__(self) -> Iterator[str]:
        return iter(self._labels)

    def __len__(self) -> int:
        return len(self._labels)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Extent):
            return False
        return (self._labels, self._sizes) == (other._labels, other._sizes)

    def __hash__(self) -> int:
        return hash((self._labels, self._sizes))

    def __reduce__(self) -> tuple[Any, ...]:
        return (Extent, (self._labels, self._sizes))

    def __repr__(self) -> str:
        inner = ", ".join(
            f"{_bare(k)}: {v}" for k, v in zip(self._labels, self._sizes, strict=True)
        )
        return "{" + inner + "}"


class Point(Mapping[str, int]):
    """A coordinate in an ``Extent``: a read-only mapping from label to index.

    ``rank`` is the row-major position in the extent, so ``**point`` passes
    the coordinates as keyword arguments (``mesh.slice(**point)``).

    >>> p = Point(7, Extent(["hosts", "gpus"], [2, 4]))
    >>> p, p["gpus"], p.rank
    ({'hosts': 1/2, 'gpus': 3/4}, 3, 7)
    """

    __slots__ = ("_coords", "_extent", "_rank")
    __hash__ = None  # type: ignore[assignment]  # as in Monarch: points are unhashable

    def __init__(self, rank: int, extent: Extent) -> None:
        if not isinstance(extent, Extent):
            raise TypeError(f"extent must be an Extent, got {type(extent).__name__}")
        n = extent.nelements
        if isinstance(rank, bool) or not isinstance(rank, int):
            raise TypeError(f"rank must be an int, got {type(rank).__name__}")
        if not 0 <= rank < n:
            raise MeshIndexError(
                f"out of range: total ranks {n}; does not contain rank {rank} (extent {extent})"
            )
        coords = []
        rest = rank
        for size in reversed(extent._sizes):
            rest, c = divmod(rest, size)
            coords.append(c)
        self._rank = rank
        self._extent = extent
        self._coords = tuple(reversed(coords))

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def extent(self) -> Extent:
        return self._extent

    def size(self, label: str) -> int:
        """The size of dimension ``label`` in this point's extent."""
        return self._extent[label]

    def __getitem__(self, label: str) -> int:
        try:
            return self._coords[self._extent._labels.index(label)]
        except ValueError:
            raise missing_dimension(label, self._extent._labels) from None

    def __contains__(self, label: object) -> bool:
        return label in self._extent._labels

    def __iter__(self) -> Iterator[str]:
        return iter(self._extent._labels)

    def __len__(self) -> int:
        return len(self._coords)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Point):
            return False
        return (self._rank, self._extent) == (other._rank, other._extent)

    def __reduce__(self) -> tuple[Any, ...]:
        return (Point, (self._rank, self._extent))

    def __repr__(self) -> str:
        parts = (
            f"{label!r}: {c}/{size}"
            for label, c, size in zip(
                self._extent._labels, self._coords, self._extent._sizes, strict=True
            )
        )
        return "{" + ", ".join(parts) + "}"
