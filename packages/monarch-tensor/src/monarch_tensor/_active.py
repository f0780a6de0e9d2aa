"""Whether torch runs locally at the controller now: ``no_mesh`` (plain
torch inside an active block) and fake runs. The device meshes of the
enclosing ``activate()`` blocks and the streams of ``stream.activate()``
blocks are ``_tensor.meshes`` and ``_tensor.streams``, beside the tensors
that use them."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

__all__ = ["no_mesh", "suspend", "suspended"]

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
