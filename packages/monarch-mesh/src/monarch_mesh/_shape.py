"""Labelled slices: the shape of a mesh, and the operations that reshape it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from math import prod
from typing import Any

from ._errors import DimensionNotFoundError, MeshIndexError, SliceError
from ._extent import Extent, check_labels
from ._slice import Slice

__all__ = ["Shape"]


def resolve_index(label: str, index: int | slice, size: int) -> range:
    """The indices of dimension ``label`` (of ``size``) that ``index`` picks.

    Ints may be negative (counted from the end); slices follow Python's rules
    but must pick at least one index and step forward.
    """
    if isinstance(index, bool) or not isinstance(index, int | slice):
        raise TypeError(
            f"index for dimension {label!r} must be an int or a slice, "
            f"got {type(index).__name__} {index!r}"
        )
    valid = f"valid: 0..{size - 1}" if size else "the dimension is empty"
    if isinstance(index, int):
        position = index + size if index < 0 else index
        if not 0 <= position < size:
            raise MeshIndexError(
                f"index {index} out of range for dimension {label!r} of size {size} ({valid})"
            )
        return range(position, position + 1)
    if index.step is not None and index.step <= 0:
        raise SliceError(f"slice step for dimension {label!r} must be positive, got {index.step}")
    picked = range(size)[index]
    if not picked:
        raise MeshIndexError(
            f"slice {_slice_text(index)} selects nothing from dimension {label!r} "
            f"of size {size} ({valid})"
        )
    return picked


def _slice_text(s: slice) -> str:
    text = f"{'' if s.start is None else s.start}:{'' if s.stop is None else s.stop}"
    return text if s.step is None else f"{text}:{s.step}"


class Shape:
    """A ``Slice`` whose dimensions have names: the shape of a mesh.

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
        return list(self._labels)

    @property
    def ndslice(self) -> Slice:
        return self._slice

    @property
    def extent(self) -> Extent:
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
        leaves it with size 1)."""
        dim = self._dim(label)
        s = self._slice
        picked = resolve_index(label, index, s._sizes[dim])
        sizes, strides = list(s._sizes), list(s._strides)
        offset = s._offset + picked.start * strides[dim]
        sizes[dim] = len(picked)
        strides[dim] *= picked.step
        return Shape._trusted(self._labels, Slice._trusted(offset, tuple(sizes), tuple(strides)))

    def at(self, label: str, index: int) -> Shape:
        """Fix dimension ``label`` at ``index`` and drop it."""
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
        """The coordinates of ``rank`` by label; ``ValueError`` if absent."""
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
            parts = _split_sizes(label, size, news, sizes_given)
            strides.extend(stride * prod(parts[j + 1 :]) for j in range(len(parts)))
            labels.extend(news)
            sizes.extend(parts)
        return Shape(labels, Slice(offset=s.offset, sizes=sizes, strides=strides))

    def flatten(self, label: str) -> Shape:
        """Collapse all dimensions into one named ``label``, in row-major order.

        Possible whenever the ranks form one arithmetic progression, which
        includes every dense shape; otherwise ``ValueError``.
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


def _split_sizes(
    label: str, size: int, news: tuple[str, ...], given: Mapping[str, int]
) -> list[int]:
    unknown = [new for new in news if new not in given]
    if len(unknown) > 1:
        raise SliceError(
            f"splitting {label!r} into {list(news)}: give the sizes of all but one of {unknown}"
        )
    known = prod(given[new] for new in news if new in given)
    if unknown:
        inferred, remainder = divmod(size, known)
        if remainder:
            raise SliceError(
                f"cannot split {label!r} of size {size} into {list(news)}: {size} is not "
                f"divisible by {known}"
            )
        return [given.get(new, inferred) for new in news]
    if known != size:
        raise SliceError(
            f"cannot split {label!r} of size {size} into {list(news)} with sizes "
            f"{[given[new] for new in news]} (product {known})"
        )
    return [given[new] for new in news]
