"""Hypothesis strategies for meshes, for this package's tests and for the
property tests of packages built on it. Needs ``hypothesis`` (the ``test``
extra)."""

from typing import Any

from hypothesis import strategies as st

from ._shape import Shape
from ._slice import Slice

__all__ = ["LABELS", "dense_shapes", "python_slices", "shapes", "sizes"]

Draw = Any  # hypothesis passes a draw function to each composite strategy

LABELS = ["hosts", "gpus", "racks", "zones", "cores"]
"""The labels of generated shapes: a shape of n dimensions gets the first n."""


@st.composite
def sizes(draw: Draw, max_dims: int = 4, max_size: int = 6) -> list[int]:
    """Lists of dimension sizes, possibly empty.

    Args:
        draw: supplied by hypothesis; callers leave it out (``sizes(3, 4)``).
        max_dims: the most dimensions.
        max_size: the largest size; every size is at least 1.
    """
    dims: list[int] = draw(st.lists(st.integers(1, max_size), max_size=max_dims))
    return dims


@st.composite
def python_slices(draw: Draw, size: int) -> slice:
    """A Python slice (possibly with negative bounds) that picks something from ``size``.

    Bounds may be ``None`` or out of range; the step, when given, is positive.

    Args:
        draw: supplied by hypothesis; callers leave it out (``python_slices(5)``).
        size: the length of the dimension the slice applies to; at least 1.
    """
    while True:
        start = draw(st.none() | st.integers(-size - 2, size + 2))
        stop = draw(st.none() | st.integers(-size - 2, size + 2))
        step = draw(st.none() | st.integers(1, size + 1))
        if range(size)[slice(start, stop, step)]:
            return slice(start, stop, step)


@st.composite
def dense_shapes(draw: Draw, max_dims: int = 4, max_size: int = 6) -> Shape:
    """Dense row-major shapes labelled from ``LABELS``, with sizes as ``sizes`` draws them.

    Args:
        draw: supplied by hypothesis; callers leave it out (``dense_shapes(3)``).
        max_dims: the most dimensions.
        max_size: the largest size of a dimension.
    """
    dims = draw(sizes(max_dims, max_size))
    return Shape(LABELS[: len(dims)], Slice.new_row_major(dims))


@st.composite
def shapes(draw: Draw, max_dims: int = 4, max_size: int = 6) -> Shape:
    """Shapes reached from a dense one by a few selections (so possibly sparse).

    Args:
        draw: supplied by hypothesis; callers leave it out (``shapes(3)``).
        max_dims: the most dimensions.
        max_size: the largest size of a dimension before selecting.
    """
    shape: Shape = draw(dense_shapes(max_dims, max_size))
    for label in draw(st.lists(st.sampled_from(shape.labels), max_size=3)) if shape.labels else []:
        size = shape.extent[label]
        shape = shape.select(label, draw(python_slices(size)))
    return shape
