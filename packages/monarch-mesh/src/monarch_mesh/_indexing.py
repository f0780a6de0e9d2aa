"""What an index, a slice or a split picks from one dimension of a shape:
plain arithmetic on sizes, with the errors a user who got it wrong needs."""

from __future__ import annotations

from collections.abc import Mapping
from math import prod

from ._errors import MeshIndexError, SliceError

__all__ = ["resolve_index", "split_sizes"]


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


def split_sizes(
    label: str, size: int, news: tuple[str, ...], given: Mapping[str, int]
) -> list[int]:
    """The sizes of ``news``, the dimensions that dimension ``label`` (of
    ``size``) splits into: as ``given``, with at most one left out and
    inferred; their product must be ``size``."""
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
