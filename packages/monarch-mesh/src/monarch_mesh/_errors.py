"""The exception hierarchy of monarch_mesh.

Each class also derives from the builtin exception that Monarch raises in the
same situation, so code written against Monarch's error types keeps working.
"""

from __future__ import annotations

__all__ = [
    "DimensionNotFoundError",
    "MeshError",
    "MeshIndexError",
    "RankNotFoundError",
    "SelectionSyntaxError",
    "SliceError",
]


class MeshError(Exception):
    """Base class of every error raised by monarch_mesh."""

    def __str__(self) -> str:
        # KeyError (a base of some subclasses) would quote the message.
        return str(self.args[0]) if self.args else ""


class DimensionNotFoundError(MeshError, KeyError, ValueError, TypeError):
    """A dimension label that the extent or shape does not have.

    It is a ``KeyError`` (so mappings behave), a ``ValueError`` (as Monarch's
    ``Extent``/``Point`` raise) and a ``TypeError`` (as Monarch's
    ``mesh.slice`` raises).

    Args:
        message: the error text, naming the dimensions that do exist.
        label: the label that was asked for.

    Attributes:
        label: the label that was asked for (``None`` if not given).
    """

    def __init__(self, message: str, label: object = None) -> None:
        super().__init__(message)
        self.label = label


class MeshIndexError(MeshError, IndexError, ValueError):
    """An index or range outside a dimension or a slice.

    Also a ``ValueError``, which Monarch's ``Shape.at``/``select`` raise here.
    """


class RankNotFoundError(MeshError, ValueError):
    """A rank that is not part of the slice or shape asked about."""


class SliceError(MeshError, ValueError):
    """An invalid slice, shape or extent definition."""


class SelectionSyntaxError(MeshError, ValueError):
    """Selection text that does not parse; ``position`` is where it went wrong.

    The message ends with the text and a caret under ``position``.

    Args:
        message: what was wrong, e.g. ``"expected ')', found end of text"``.
        text: the whole selection text that was parsed.
        position: the character offset in ``text`` where parsing failed.

    Attributes:
        text: the whole selection text that was parsed.
        position: the character offset in ``text`` where parsing failed.
    """

    def __init__(self, message: str, text: str, position: int) -> None:
        pointer = f"\n  {text}\n  {' ' * position}^"
        super().__init__(f"{message} at position {position}{pointer}")
        self.text = text
        self.position = position
