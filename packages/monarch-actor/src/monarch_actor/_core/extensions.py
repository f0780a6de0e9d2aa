"""Hooks that sibling packages plug in (``monarch-tensor``: ``activate``,
``rref``, ``arguments``), found as Python entry points of group
``monarch.extensions``, so this package never imports them."""

from __future__ import annotations

import functools
import importlib.metadata
from collections.abc import Callable
from typing import Any

__all__ = ["EXTENSION_GROUP", "extension"]


EXTENSION_GROUP = "monarch.extensions"

# what each hook is for, and the package that provides it
_PROVIDERS = {
    "activate": ("ProcMesh.activate() (distributed tensors)", "monarch-tensor"),
    "rref": ("the rref() adverb (distributed tensors)", "monarch-tensor"),
    "arguments": ("distributed tensors as endpoint arguments", "monarch-tensor"),
}


@functools.cache
def _entry_points() -> dict[str, Any]:
    return {ep.name: ep for ep in importlib.metadata.entry_points(group=EXTENSION_GROUP)}


def extension(name: str, required: bool = True) -> Callable[..., Any] | None:
    """The hook ``name`` a sibling package declares as a Python entry point
    of group ``monarch.extensions`` (loaded once). Missing: ``None`` unless
    ``required``, then a ``RuntimeError`` naming the package to install."""
    point = _entry_points().get(name)
    if point is not None:
        hook: Callable[..., Any] = point.load()
        return hook
    if not required:
        return None
    what, package = _PROVIDERS.get(name, (f"the {name!r} extension", "the package providing it"))
    raise RuntimeError(
        f"{what} needs the {package} package, which is not installed here: pip install {package}"
    )
