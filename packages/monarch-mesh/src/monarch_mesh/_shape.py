"""Named dimensions: the sizes of a mesh (``Extent``), a coordinate in it
(``Point``) and the labelled strided slice of ranks it covers (``Shape``).

They refer to each other (an extent's region is a shape, a shape has an
extent, an extent makes its points), so they live in one module: split
apart, the two halves would import each other.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from math import prod
from typing import Any

from ._errors import DimensionNotFoundError, MeshIndexError, SliceError
from ._indexing import resolve_index, split_sizes
from ._labels import bare, check_labels, missing_dimension
from ._slice import Slice

__all__ = ["Extent", "Point", "Shape"]


class Extent(Mapping[str, int]):
    """An ordered, read-only mapping from dimension label to size.

    Args:
        labels: the dimension names, in order (the last varies fastest); non-empty,
            distinct strs.
        sizes: the size of each dimension, one per label; ints >= 0.

    Raises:
        SliceError: a label is empty, not a str or repeated, the numbers of labels
            and sizes differ, or a size is not an int >= 0.

    Examples:
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
        """The dimension labels, in order."""
        return list(self._labels)

    @property
    def sizes(self) -> list[int]:
        """The size of each dimension, in label order."""
        return list(self._sizes)

    @property
    def nelements(self) -> int:
        """The number of points: the product of the sizes (1 with no dimensions)."""
        return prod(self._sizes)

    @property
    def region(self) -> Shape:
        """The dense row-major shape with these labels and sizes."""
        return Shape(self._labels, Slice.new_row_major(self._sizes))

    def point(self, rank: int) -> Point:
        """The point at row-major ``rank``.

        Args:
            rank: a row-major position, ``0 <= rank < nelements``.

        Raises:
            MeshIndexError: ``rank`` is out of range.
            TypeError: ``rank`` is not an int.
        """
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
        inner = ", ".join(f"{bare(k)}: {v}" for k, v in zip(self._labels, self._sizes, strict=True))
        return "{" + inner + "}"


class Point(Mapping[str, int]):
    """A coordinate in an ``Extent``: a read-only mapping from label to index.

    Being a mapping, ``**point`` passes the coordinates as keyword arguments
    (``mesh.slice(**point)``). Points are not hashable, as in Monarch.

    Args:
        rank: the point's row-major position in ``extent``.
        extent: the extent the point lies in.

    Raises:
        TypeError: ``extent`` is not an ``Extent`` or ``rank`` is not an int.
        MeshIndexError: ``rank`` is not below ``extent.nelements``.

    Examples:
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
        """The point's row-major position in its extent."""
        return self._rank

    @property
    def extent(self) -> Extent:
        """The extent the point lies in."""
        return self._extent

    def size(self, label: str) -> int:
        """The size of dimension ``label`` in this point's extent.

        Args:
            label: a dimension of the extent.

        Raises:
            DimensionNotFoundError: the extent has no dimension ``label``.
        """
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


class Shape:
    """A ``Slice`` whose dimensions have names: the shape of a mesh.

    Args:
        labels: one name per dimension of ``slice``, in order; non-empty, distinct strs.
        slice: the ranks the shape covers.

    Raises:
        TypeError: ``slice`` is not a ``Slice``.
        SliceError: a label is empty, not a str or repeated, or the number of labels
            is not ``slice.ndim``.

    Examples:
        >>> shape = Shape(["hosts", "gpus"], Slice.new_row_major([2, 4]))
        >>> print(shape.select("gpus", slice(1, None, 2)))
        {hosts=2,gpus=2}
        >>> shape.at("hosts", 1).ranks()
        [4, 5, 6, 7]
    """

    __slots__ = ("_labels", "_slice")

    def __init__(self, labels: Sequence[str], slice: Slice) -> None:
        if not isinstance(slice, Slice):
            raise TypeError(f"slice must be a Slice, got {type(slice).__name__}")
        self._labels = check_labels(labels)
        if len(self._labels) != slice.ndim:
            raise SliceError(
                f"{len(self._labels)} labels {list(self._labels)} for a slice of "
                f"{slice.ndim} dimensions"
            )
        self._slice = slice

    @classmethod
    def _trusted(cls, labels: tuple[str, ...], slice: Slice) -> Shape:
        """A shape from labels and a slice already known to fit (derived shapes)."""
        shape = cls.__new__(cls)
        shape._labels, shape._slice = labels, slice
        return shape

    @staticmethod
    def unity() -> Shape:
        """The shape with no dimensions: exactly one rank, rank 0."""
        return Shape([], Slice(offset=0, sizes=[], strides=[]))

    # -- attributes -------------------------------------------------------------

    @property
    def labels(self) -> list[str]:
        """The dimension labels, in order."""
        return list(self._labels)

    @property
    def ndslice(self) -> Slice:
        """The strided slice of ranks underneath, without the labels."""
        return self._slice

    @property
    def extent(self) -> Extent:
        """The labels with their sizes in this shape."""
        return Extent(self._labels, self._slice.sizes)

    def __len__(self) -> int:
        return len(self._slice)

    def _dim(self, label: str) -> int:
        try:
            return self._labels.index(label)
        except ValueError:
            raise self._unknown(label) from None

    def _unknown(self, label: object) -> DimensionNotFoundError:
        known = ", ".join(self._labels) if self._labels else "none"
        return DimensionNotFoundError(
            f"Shape does not have dimension labeled {label!r} (its dimensions: {known})", label
        )

    # -- selecting ----------------------------------------------------------------

    def select(self, label: str, index: int | slice) -> Shape:
        """Restrict dimension ``label`` to ``index``; the dimension stays (an int
        leaves it with size 1).

        Args:
            label: the dimension to restrict.
            index: an int (negative counts from the end) or a Python slice with a
                positive step that picks at least one index.

        Returns:
            A new shape with the same labels.

        Raises:
            DimensionNotFoundError: the shape has no dimension ``label``.
            MeshIndexError: the int is out of range, or the slice picks nothing.
            SliceError: the slice's step is not positive.
            TypeError: ``index`` is neither an int nor a slice.
        """
        dim = self._dim(label)
        s = self._slice
        picked = resolve_index(label, index, s._sizes[dim])
        sizes, strides = list(s._sizes), list(s._strides)
        offset = s._offset + picked.start * strides[dim]
        sizes[dim] = len(picked)
        strides[dim] *= picked.step
        return Shape._trusted(self._labels, Slice._trusted(offset, tuple(sizes), tuple(strides)))

    def at(self, label: str, index: int) -> Shape:
        """Fix dimension ``label`` at ``index`` and drop it.

        Args:
            label: the dimension to fix.
            index: the index to keep; negative counts from the end.

        Returns:
            A new shape without dimension ``label``.

        Raises:
            DimensionNotFoundError: the shape has no dimension ``label``.
            MeshIndexError: ``index`` is out of range.
            TypeError: ``index`` is not an int.
        """
        if not isinstance(index, int) or isinstance(index, bool):
            raise TypeError(f"at() takes an int index for {label!r}, got {index!r}")
        dim = self._dim(label)
        s = self._slice
        picked = resolve_index(label, index, s._sizes[dim])
        offset = s._offset + picked.start * s._strides[dim]
        sizes = s._sizes[:dim] + s._sizes[dim + 1 :]
        strides = s._strides[:dim] + s._strides[dim + 1 :]
        labels = self._labels[:dim] + self._labels[dim + 1 :]
        return Shape._trusted(labels, Slice._trusted(offset, sizes, strides))

    def index(self, **coords: int | slice) -> Shape:
        """Select several dimensions at once, as ``mesh.slice(**coords)`` does:
        an int fixes and drops its dimension, a slice restricts and keeps it."""
        for label in coords:
            self._dim(label)  # reject unknown labels before doing any work
        shape = self
        for label, index in coords.items():
            shape = shape.at(label, index) if isinstance(index, int) else shape.select(label, index)
        return shape

    # -- ranks --------------------------------------------------------------------

    def ranks(self) -> list[int]:
        """Every rank of the shape, in row-major order."""
        return list(self._slice)

    def coordinates(self, rank: int) -> dict[str, int]:
        """The coordinates of ``rank`` by label.

        Args:
            rank: a rank of this shape.

        Raises:
            RankNotFoundError: the shape does not contain ``rank`` (a ``ValueError``).
        """
        return dict(zip(self._labels, self._slice.coordinates(rank), strict=True))

    def location(self, **coords: int) -> int:
        """The rank at the given coordinates (every label needed)."""
        missing = [label for label in self._labels if label not in coords]
        extra = [label for label in coords if label not in self._labels]
        if extra:
            raise self._unknown(extra[0])
        if missing:
            raise SliceError(f"location() needs a coordinate for {missing}")
        return self._slice.location([coords[label] for label in self._labels])

    # -- reshaping ----------------------------------------------------------------

    def rename(self, **names: str) -> Shape:
        """Rename dimensions (``old=new``); the others keep their labels."""
        for old in names:
            self._dim(old)
        return Shape([names.get(label, label) for label in self._labels], self._slice)

    def split(self, **spec: Sequence[str] | int) -> Shape:
        """Split dimensions into several, row-major.

        ``shape.split(hosts=("dp", "pp"), pp=2)``: a key naming an existing
        dimension maps to the tuple of labels replacing it; any other key is a
        new label with its size. Per split, at most one size may be left out
        and is inferred.
        """
        splits: dict[str, tuple[str, ...]] = {}
        sizes_given: dict[str, int] = {}
        for key, value in spec.items():
            if key in self._labels:
                if isinstance(value, str) or not isinstance(value, Sequence) or not value:
                    raise SliceError(
                        f"split({key}=...) takes a non-empty tuple of new labels, got {value!r}"
                    )
                splits[key] = check_labels(value)
            else:
                if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                    raise SliceError(
                        f"size of new dimension {key!r} must be an int >= 1, got {value!r}"
                    )
                sizes_given[key] = value
        used = {new for news in splits.values() for new in news}
        unused = sorted(set(sizes_given) - used)
        if unused:
            raise SliceError(
                f"size given for {unused}, which no split creates "
                f"(dimensions are {list(self._labels)})"
            )
        labels: list[str] = []
        sizes: list[int] = []
        strides: list[int] = []
        s = self._slice
        for label, size, stride in zip(self._labels, s.sizes, s.strides, strict=True):
            if label not in splits:
                labels.append(label)
                sizes.append(size)
                strides.append(stride)
                continue
            news = splits[label]
            parts = split_sizes(label, size, news, sizes_given)
            strides.extend(stride * prod(parts[j + 1 :]) for j in range(len(parts)))
            labels.extend(news)
            sizes.extend(parts)
        return Shape(labels, Slice(offset=s.offset, sizes=sizes, strides=strides))

    def flatten(self, label: str) -> Shape:
        """Collapse all dimensions into one named ``label``, in row-major order.

        Possible whenever the ranks form one arithmetic progression, which
        includes every dense shape.

        Args:
            label: the name of the single dimension.

        Raises:
            SliceError: the ranks are not evenly spaced (a ``ValueError``).
        """
        step = self._slice.as_progression()
        if step is None:
            raise SliceError(
                f"cannot flatten sparse mesh {self}: its ranks {self._preview()} "
                "do not form one evenly spaced sequence"
            )
        return Shape([label], Slice(offset=self._slice.offset, sizes=[len(self)], strides=[step]))

    def _preview(self) -> str:
        ranks: list[int] = []
        for rank in self._slice:
            if len(ranks) == 6:
                return "[" + ", ".join(map(str, ranks)) + ", ...]"
            ranks.append(rank)
        return str(ranks)

    # -- value semantics --------------------------------------------------------

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Shape):
            return NotImplemented
        return (self._labels, self._slice) == (other._labels, other._slice)

    def __hash__(self) -> int:
        return hash((self._labels, self._slice))

    def __reduce__(self) -> tuple[Any, ...]:
        return (Shape, (self._labels, self._slice))

    def __str__(self) -> str:
        sizes = self._slice.sizes
        return "{" + ",".join(f"{k}={v}" for k, v in zip(self._labels, sizes, strict=True)) + "}"

    def __repr__(self) -> str:
        return f"Shape {{ labels: {list(self._labels)}, slice: {self._slice!r} }}"
