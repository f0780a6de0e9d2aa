"""Runtime settings read from the environment (Monarch's names where it has one)."""

from __future__ import annotations

import os

__all__ = ["cast_fanout"]


def _int(names: tuple[str, ...], default: int, low: int) -> int:
    for name in names:
        text = os.environ.get(name)
        if text is None:
            continue
        try:
            value = int(text)
        except ValueError:
            raise ValueError(f"{name} must be an integer, got {text!r}") from None
        if value < low:
            raise ValueError(f"{name} must be at least {low}, got {value}")
        return value
    return default


def cast_fanout() -> int:
    """Children per node of a broadcast's multicast tree."""
    return _int(("MONARCH_CAST_FANOUT", "HYPERACTOR_MESH_MAX_CAST_FANOUT"), 16, 1)
