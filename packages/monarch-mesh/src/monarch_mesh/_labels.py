"""Dimension labels: what makes a valid list of them, and how they are
named in errors and printed. Every named-dimension type needs these."""

from __future__ import annotations

import re
from collections.abc import Sequence

from ._errors import DimensionNotFoundError, SliceError

__all__ = ["bare", "check_labels", "missing_dimension"]

_WORD = re.compile(r"[A-Za-z0-9_]*")


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
    """The error for ``label``, which is not among ``labels``."""
    known = ", ".join(labels) if labels else "none"
    return DimensionNotFoundError(f"Dimension {label!r} not found (dimensions: {known})", label)


def bare(label: str) -> str:
    """A label as Monarch prints it in an extent: bare if it is a plain word."""
    if _WORD.fullmatch(label):
        return label
    return '"' + label.replace("\\", "\\\\").replace('"', '\\"') + '"'
