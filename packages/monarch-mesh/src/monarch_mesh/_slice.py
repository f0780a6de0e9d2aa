"""Strided n-dimensional slices of a flat rank space.

A ``Slice`` maps each coordinate ``(c0, c1, ...)`` with ``0 <= ci < sizes[i]``
to the rank ``offset + sum(ci * strides[i])``; positions count coordinates in
row-major order (the last dimension varies fastest).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from itertools import pairwise, product
from math import prod
from typing import Any, overload

from ._errors import MeshIndexError, RankNotFoundError, SliceError

__all__ = ["Slice"]


def _check_int(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise SliceError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise SliceError(f"{name} must be >= {minimum}, got {value}")
    return value


class Slice:
    """An n-dimensional strided view of ranks: ``offset``, ``sizes``, ``strides``.

    The coordinates ``c`` name the rank ``offset + sum(c[i] * strides[i])``.
    Distinct coordinates always name distinct ranks: strides that alias
    (two coordinates, one rank) are rejected with ``SliceError`` (a ``ValueError``).

    Args:
        offset: the rank at coordinates all zero; an int >= 0.
        sizes: the number of coordinates along each dimension; ints >= 0.
        strides: how far the rank moves per step along each dimension, one per
            size; ints >= 1.

    Raises:
        SliceError: a value is not an int or is too small, ``sizes`` and ``strides``
            differ in length, or the strides alias.

    Examples:
        >>> s = Slice(offset=0, sizes=[2, 3], strides=[3, 1])
        >>> list(s), s[4], s.index(4), s.coordinates(4)
        ([0, 1, 2, 3, 4, 5], 4, 4, [1, 1])
    """

    __slots__ = ("_by_stride", "_len", "_offset", "_positions", "_sizes", "_strides")

    def __init__(self, *, offset: int, sizes: Sequence[int], strides: Sequence[int]) -> None:
        sizes, strides = tuple(sizes), tuple(strides)
        if not (
            type(offset) is int
            and offset >= 0
            and all(type(v) is int and v >= 0 for v in sizes)
            and all(type(v) is int and v >= 1 for v in strides)
        ):  # the slow path, for the message (and int subclasses other than bool)
            offset = _check_int("offset", offset, 0)
            sizes = tuple(_check_int(f"sizes[{i}]", v, 0) for i, v in enumerate(sizes))
            strides = tuple(_check_int(f"strides[{i}]", v, 1) for i, v in enumerate(strides))
        if len(sizes) != len(strides):
            raise SliceError(
                f"sizes and strides must have the same length, got {len(sizes)} sizes "
                f"and {len(strides)} strides"
            )
        self._init(offset, sizes, strides)

    @classmethod
    def _trusted(cls, offset: int, sizes: tuple[int, ...], strides: tuple[int, ...]) -> Slice:
        """A slice from values already known to be ints in range (derived slices)."""
        s = cls.__new__(cls)
        s._init(offset, sizes, strides)
        return s

    def _init(self, offset: int, sizes: tuple[int, ...], strides: tuple[int, ...]) -> None:
        self._offset, self._sizes, self._strides = offset, sizes, strides
        self._len = prod(sizes)  # asked of every message's mesh
        self._by_stride = _greedy_order(sizes, strides)
        self._positions: dict[int, int] | None = None
        if self._by_stride is None:
            # No greedy decomposition: check for aliasing the hard way, and
            # keep the table that rank lookups then need.
            self._positions = {rank: position for position, rank in enumerate(self)}
            if len(self._positions) != len(self):
                raise SliceError(
                    f"strides {list(strides)} alias for sizes {list(sizes)}: "
                    "two coordinates would name the same rank"
                )

    # -- construction ---------------------------------------------------------

    @staticmethod
    def new_row_major(sizes: Sequence[int]) -> Slice:
        """The dense slice over ``sizes`` at offset 0, last dimension fastest.

        Args:
            sizes: the size of each dimension; ints >= 0.

        Raises:
            SliceError: a size is not an int >= 0.
        """
        strides: list[int] = []
        step = 1
        for size in reversed(sizes):
            strides.append(step)
            step *= max(size, 1)
        return Slice(offset=0, sizes=sizes, strides=strides[::-1])

    @staticmethod
    def from_list(ranks: Iterable[int]) -> list[Slice]:
        """Compress ranks into the fewest 1-D strided slices, in ascending order.

        The ranks are sorted first; each returned slice covers a run of
        consecutive ranks that forms an arithmetic progression, and no
        partition into runs has fewer slices.

        Args:
            ranks: distinct ints >= 0, in any order.

        Returns:
            The 1-D slices, in ascending order of rank; empty for no ranks.

        Raises:
            SliceError: a rank is not an int, is negative, or appears twice.
        """
        values = list(ranks)
        if not all(type(v) is int for v in values):
            values = [_check_int("rank", v, 0) for v in values]
        values.sort()
        if values and values[0] < 0:
            raise SliceError(f"rank must be >= 0, got {values[0]}")
        if len(set(values)) != len(values):
            dup = next(a for a, b in pairwise(values) if a == b)
            raise SliceError(f"rank {dup} appears more than once")
        if len(values) > 2:  # the common case, one progression, checked at C speed
            step = values[1] - values[0]
            if values == list(range(values[0], values[-1] + 1, step)):
                return [Slice(offset=values[0], sizes=[len(values)], strides=[step])]
        return [
            Slice(offset=values[lo], sizes=[hi - lo], strides=[_run_step(values, lo, hi)])
            for lo, hi in _fewest_progressions(values)
        ]

    # -- attributes -----------------------------------------------------------

    @property
    def offset(self) -> int:
        """The rank at coordinates all zero."""
        return self._offset

    @property
    def sizes(self) -> list[int]:
        """The number of coordinates along each dimension."""
        return list(self._sizes)

    @property
    def strides(self) -> list[int]:
        """How far the rank moves per step along each dimension."""
        return list(self._strides)

    @property
    def ndim(self) -> int:
        """The number of dimensions."""
        return len(self._sizes)

    def __len__(self) -> int:
        return self._len

    # -- rank <-> position <-> coordinates -------------------------------------

    @overload
    def __getitem__(self, position: int) -> int: ...
    @overload
    def __getitem__(self, position: slice) -> tuple[int, ...]: ...

    def __getitem__(self, position: int | slice) -> int | tuple[int, ...]:
        """The rank at ``position`` (row-major; negative counts from the end),
        or a tuple of ranks for a Python slice of positions."""
        n = len(self)
        if isinstance(position, slice):
            return tuple(self[p] for p in range(n)[position])
        if position < 0:
            position += n
        if not 0 <= position < n:
            raise MeshIndexError(f"position {position} out of range for a slice of {n} ranks")
        rank = self._offset
        for size, stride in zip(reversed(self._sizes), reversed(self._strides), strict=True):
            position, c = divmod(position, size)
            rank += c * stride
        return rank

    def get(self, position: int) -> int:
        """The rank at ``position``, as ``slice[position]`` (Monarch's spelling).

        Args:
            position: a row-major position; negative counts from the end.

        Raises:
            MeshIndexError: ``position`` is out of range.
        """
        return self[position]

    def nditem(self, coordinates: Sequence[int]) -> int:
        """The rank at ``coordinates`` (Monarch's name for ``location``).

        Args:
            coordinates: one index per dimension.

        Raises:
            MeshIndexError: the number of coordinates is not ``ndim``, or one is out
                of range.
        """
        return self.location(coordinates)

    def location(self, coordinates: Sequence[int]) -> int:
        """The rank at ``coordinates``.

        Args:
            coordinates: one index per dimension, each ``0 <= c < size``.

        Raises:
            MeshIndexError: the number of coordinates is not ``ndim``, or one is out
                of range (an ``IndexError``).
        """
        if len(coordinates) != len(self._sizes):
            raise MeshIndexError(f"expected {len(self._sizes)} coordinates, got {len(coordinates)}")
        rank = self._offset
        for dim, (c, size, stride) in enumerate(
            zip(coordinates, self._sizes, self._strides, strict=True)
        ):
            if not 0 <= c < size:
                raise MeshIndexError(
                    f"coordinate {c} out of range for dimension {dim} of size {size}"
                )
            rank += c * stride
        return rank

    def coordinates(self, rank: int) -> list[int]:
        """The coordinates of ``rank``, one index per dimension.

        Args:
            rank: a rank of this slice.

        Raises:
            RankNotFoundError: the slice does not contain ``rank`` (a ``ValueError``).
        """
        coords = self._locate(rank)
        if coords is None:
            raise RankNotFoundError(f"rank {rank} is not in {self!r}")
        return coords

    def index(self, rank: int) -> int:
        """The row-major position of ``rank``.

        Args:
            rank: a rank of this slice.

        Raises:
            RankNotFoundError: the slice does not contain ``rank`` (a ``ValueError``).
        """
        position = 0
        for c, size in zip(self.coordinates(rank), self._sizes, strict=True):
            position = position * size + c
        return position

    def __contains__(self, rank: object) -> bool:
        return isinstance(rank, int) and self._locate(rank) is not None

    def __iter__(self) -> Iterator[int]:
        sizes = self._sizes
        if len(sizes) == 1:  # most meshes a message goes to: no generator to run
            step = self._strides[0]
            return iter(range(self._offset, self._offset + sizes[0] * step, step))
        if not sizes:
            return iter((self._offset,))
        return self._ranks()

    def _ranks(self) -> Iterator[int]:
        if 0 in self._sizes:
            return
        *outer, inner = zip(self._sizes, self._strides, strict=True)
        inner_span = inner[0] * inner[1]
        for combo in product(*(range(0, size * stride, stride) for size, stride in outer)):
            start = self._offset + sum(combo)
            yield from range(start, start + inner_span, inner[1])

    def _locate(self, rank: int) -> list[int] | None:
        if 0 in self._sizes:
            return None
        coords = [0] * len(self._sizes)
        if self._positions is None:
            rest = rank - self._offset
            if rest < 0:
                return None
            for dim in self._by_stride:  # type: ignore[union-attr]
                c, rest = divmod(rest, self._strides[dim])
                if c >= self._sizes[dim]:
                    return None
                coords[dim] = c
            return coords if rest == 0 else None
        position = self._positions.get(rank)
        if position is None:
            return None
        for dim in range(len(self._sizes) - 1, -1, -1):
            position, coords[dim] = divmod(position, self._sizes[dim])
        return coords

    # -- structure ------------------------------------------------------------

    def is_contiguous(self) -> bool:
        """Whether the ranks are exactly ``offset, offset+1, ..., offset+len-1``."""
        return self.as_progression() == 1

    def as_progression(self) -> int | None:
        """The step if the ranks, in row-major order, form one arithmetic
        progression (so one 1-D slice holds them), else ``None``."""
        dims = [
            (size, stride)
            for size, stride in zip(self._sizes, self._strides, strict=True)
            if size > 1
        ]
        if not dims:
            return 1
        for (_, outer), (size, inner) in pairwise(dims):
            if outer != inner * size:
                return None
        return dims[-1][1]

    # -- value semantics --------------------------------------------------------

    def _key(self) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
        return (self._offset, self._sizes, self._strides)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Slice):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, self._key())

    def __repr__(self) -> str:
        return (
            f"Slice {{ offset: {self._offset}, sizes: {list(self._sizes)}, "
            f"strides: {list(self._strides)} }}"
        )


def _greedy_order(sizes: tuple[int, ...], strides: tuple[int, ...]) -> tuple[int, ...] | None:
    """The dimensions of size > 1, largest stride first, if every stride
    exceeds the farthest reach of all smaller ones; else ``None``.

    Then the coordinates of a rank follow by greedy division in this order
    (no lookup table), and no two coordinates can alias. Every slice made by
    selecting, splitting or flattening a row-major slice has this form.
    """
    dims = sorted((d for d, size in enumerate(sizes) if size > 1), key=strides.__getitem__)
    reach = 0
    for dim in dims:
        if strides[dim] <= reach:
            return None if 0 not in sizes else tuple(dims[::-1])
        reach += strides[dim] * (sizes[dim] - 1)
    return tuple(dims[::-1])


def _rebuild(offset: int, sizes: tuple[int, ...], strides: tuple[int, ...]) -> Slice:
    return Slice(offset=offset, sizes=sizes, strides=strides)


def _run_step(values: list[int], lo: int, hi: int) -> int:
    return values[lo + 1] - values[lo] if hi - lo > 1 else 1


def _fewest_progressions(values: list[int]) -> list[tuple[int, int]]:
    """Split sorted ``values`` into the fewest runs ``values[lo:hi]`` that are
    arithmetic progressions.

    ``reach[i]`` is the end of the longest progression starting at ``i``; it
    never decreases with ``i``, so the best split ending at ``j`` looks back
    over a window whose left edge only moves right: a monotone queue keeps
    the window's minimum, and the whole split costs O(n).
    """
    n = len(values)
    if n == 0:
        return []
    reach = [0] * n
    reach[n - 1] = n
    for i in range(n - 2, -1, -1):
        if i + 2 < n and values[i + 1] - values[i] == values[i + 2] - values[i + 1]:
            reach[i] = reach[i + 1]
        else:
            reach[i] = min(i + 2, n)
    best = [0] * (n + 1)  # best[j]: fewest runs covering values[:j]
    cut = [0] * (n + 1)  # cut[j]: start of the last run in that split
    window: list[int] = []  # candidate starts, best[] increasing
    head = 0
    for j in range(1, n + 1):
        i = j - 1
        while len(window) > head and best[window[-1]] >= best[i]:
            window.pop()
        window.append(i)
        while reach[window[head]] < j:
            head += 1
        start = window[head]
        best[j] = best[start] + 1
        cut[j] = start
    runs = []
    j = n
    while j > 0:
        runs.append((cut[j], j))
        j = cut[j]
    return runs[::-1]
