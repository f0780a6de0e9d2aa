"""Receive buffers for large frames.

A large frame is received straight into a buffer of its own. Allocating it as
a ``bytearray`` writes every byte twice (the zero fill, then the data), and a
``bytes`` payload then needs one more copy out of it: on a 2-core machine
that is ~120 ms per 64 MiB. Instead the buffer is a fresh, uninitialised
``bytes`` object that the kernel writes into before anyone else sees it, the
way CPython's own ``os.read`` fills the ``bytes`` it returns; the codec then
hands that very object to a ``bytes`` payload without copying.

A buffer of ``HUGE_FROM`` bytes or more is also marked for transparent huge
pages (Linux, ``madvise(MADV_HUGEPAGE)``). glibc gives an allocation that big
a mapping of its own, new each time, so the kernel faults its pages in one by
one as the data lands: 16,384 faults for 64 MiB, which took 60% of receiving
it here. In 2 MiB pages that is 32 faults, and the frame lands 2.5x faster.
The advice is only a hint: where huge pages are off it changes nothing.
"""

from __future__ import annotations

import ctypes
import functools
import mmap
import sys
from typing import Any, Final

__all__ = ["HUGE_FROM", "bytes_of", "fresh_buffer", "owning_bytes"]

HUGE_FROM: Final = 32 << 20
"""Buffers from this size on are advised to use huge pages: glibc's largest
threshold for giving an allocation a mapping of its own (so the advice
covers this buffer's memory only, and ends with it)."""
_MADV_HUGEPAGE: Final = getattr(mmap, "MADV_HUGEPAGE", None)

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
    return _fresh_bytes(size)[1]


def _fresh_bytes(size: int) -> tuple[bytes, memoryview]:
    """A new uninitialised ``bytes`` of ``size`` bytes, and a writable view
    over it (CPython only: ``_FAST``)."""
    owner = _new_bytes(None, size)
    address = _bytes_address(owner)
    if size >= HUGE_FROM:
        _advise_huge_pages(address, size)
    window: Any = (ctypes.c_ubyte * size).from_address(address)
    window.owner = owner  # the view keeps the window alive, the window the bytes
    return owner, memoryview(window).cast("B")


def _advise_huge_pages(address: int, size: int) -> None:
    """Ask for huge pages over the whole pages of ``[address, address + size)``;
    where the kernel cannot, the pages stay as they were."""
    if _MADV_HUGEPAGE is None or not sys.platform.startswith("linux"):
        return
    page = mmap.PAGESIZE
    start = -(-address // page) * page  # the first whole page: the buffer's header shares one
    end = (address + size) // page * page
    if end > start:
        _madvise()(start, end - start, _MADV_HUGEPAGE)  # a hint: its failure changes nothing


@functools.cache
def _madvise() -> Any:
    """libc's ``madvise``, looked up when a buffer first needs it."""
    madvise = ctypes.CDLL(None).madvise
    madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    return madvise


def owning_bytes(view: memoryview) -> bytes | None:
    """The ``bytes`` object a whole buffer from ``fresh_buffer`` fills, if it is one."""
    owner = getattr(view.obj, "owner", None)
    if type(owner) is bytes and len(owner) == view.nbytes:
        return owner
    return None


def bytes_of(view: memoryview) -> bytes:
    """``view``'s bytes as a ``bytes`` object: the one it fills when it is a whole
    buffer from ``fresh_buffer``, else a copy (made in a fresh buffer, so a big
    copy lands in huge pages too)."""
    owner = owning_bytes(view)
    if owner is not None:
        return owner
    if not _FAST or view.nbytes < HUGE_FROM:
        return bytes(view)
    copy, window = _fresh_bytes(view.nbytes)
    window[:] = view.cast("B") if view.format != "B" or view.ndim != 1 else view
    return copy
