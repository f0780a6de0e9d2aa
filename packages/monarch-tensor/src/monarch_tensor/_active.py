"""What is active at the controller: the streams of ``stream.activate()``
blocks, and ``no_mesh`` (plain torch inside an active block). The device
meshes of the enclosing ``activate()`` blocks are ``_tensor.meshes`` (a
tensor's mesh is what the tensors module knows of it)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["no_mesh", "streams", "suspended"]

streams: list[Any] = []  # Stream, innermost last
_local = threading.local()


def suspended() -> bool:
    """Whether torch runs locally here now (``no_mesh``, or a fake run)."""
    return getattr(_local, "on", False)


@contextlib.contextmanager
def suspend() -> Iterator[None]:
    """Plain torch for the ``with`` block, on this thread."""
    before = getattr(_local, "on", False)
    _local.on = True
    try:
        yield
    finally:
        _local.on = before


class _NoMesh:
    """``no_mesh.activate()``: plain local torch inside an active block."""

    def activate(self) -> contextlib.AbstractContextManager[None]:
        """Run torch locally for the ``with`` block."""
        return suspend()

    def __repr__(self) -> str:
        return "no_mesh"


no_mesh = _NoMesh()
"""Plain local torch inside an active mesh: ``with no_mesh.activate():``
runs torch operations here, on ordinary tensors, until the block ends."""
