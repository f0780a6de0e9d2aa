"""Receive buffers for large frames.

A large frame is received straight into a buffer of its own. Allocating it as
a ``bytearray`` writes every byte twice (the zero fill, then the data), and a
``bytes`` payload then needs one more copy out of it: on a 2-core machine
that is ~120 ms per 64 MiB. Instead the buffer is a fresh, uninitialised
``bytes`` object that the kernel writes into before anyone else sees it, the
way CPython's own ``os.read`` fills the ``bytes`` it returns; the codec then
hands that very object to a ``bytes`` payload without copying.
"""

from __future__ import annotations

import ctypes
from typing import Any

__all__ = ["fresh_buffer", "owning_bytes"]

try:
    _new_bytes = ctypes.pythonapi.PyBytes_FromStringAndSize
    _new_bytes.restype = ctypes.py_object
    _new_bytes.argtypes = (ctypes.c_void_p, ctypes.c_ssize_t)
    _bytes_address = ctypes.pythonapi.PyBytes_AsString
    _bytes_address.restype = ctypes.c_void_p
    _bytes_address.argtypes = (ctypes.py_object,)
    _FAST = True
except (AttributeError, OSError):  # not CPython: plain bytearrays
    _FAST = False


def fresh_buffer(size: int) -> memoryview:
    """A writable, uninitialised buffer of ``size`` bytes (a flat ``B`` view)."""
    if not _FAST or size == 0:
        return memoryview(bytearray(size))
    owner = _new_bytes(None, size)
    window: Any = (ctypes.c_ubyte * size).from_address(_bytes_address(owner))
    window.owner = owner  # the view keeps the window alive, the window the bytes
    return memoryview(window).cast("B")


def owning_bytes(view: memoryview) -> bytes | None:
    """The ``bytes`` object a whole buffer from ``fresh_buffer`` fills, if it is one."""
    owner = getattr(view.obj, "owner", None)
    if type(owner) is bytes and len(owner) == view.nbytes:
        return owner
    return None
