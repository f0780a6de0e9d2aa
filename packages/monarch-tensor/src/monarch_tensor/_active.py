"""What is active at the controller: the device meshes of the enclosing
``activate()`` blocks, the streams of ``stream.activate()`` blocks, and
``no_mesh`` (plain torch inside an active block)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._mesh import DeviceMesh

__all__ = ["meshes", "no_mesh", "streams", "suspended"]

meshes: list[DeviceMesh] = []  # innermost last
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
