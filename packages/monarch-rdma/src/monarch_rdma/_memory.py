"""Local memory: what ``RDMABuffer(data)``, ``read_into(dst)`` and
``write_from(src)`` accept, reduced to an address, a length and a device.

Accepted: 1-D contiguous torch tensors of any dtype (CPU or CUDA, views and
slices too), 1-D C-contiguous memoryviews, and 1-D C-contiguous numpy arrays.
torch and numpy are never imported here: an object is a tensor only if torch
is already loaded.
"""

from __future__ import annotations

import ctypes
import sys
from dataclasses import dataclass
from typing import Any

__all__ = ["LocalMemory", "as_local_memory", "host_view"]

_SHAPE_ERROR = (
    "RDMABuffer only supports 1d contiguous torch.Tensor or 1d c-contiguous memoryview. Got: {}"
)


class _PyBuffer(ctypes.Structure):
    _fields_ = [
        ("buf", ctypes.c_void_p),
        ("obj", ctypes.py_object),
        ("len", ctypes.c_ssize_t),
        ("itemsize", ctypes.c_ssize_t),
        ("readonly", ctypes.c_int),
        ("ndim", ctypes.c_int),
        ("format", ctypes.c_char_p),
        ("shape", ctypes.c_void_p),
        ("strides", ctypes.c_void_p),
        ("suboffsets", ctypes.c_void_p),
        ("internal", ctypes.c_void_p),
    ]


_GetBuffer = ctypes.pythonapi.PyObject_GetBuffer
_GetBuffer.argtypes = [ctypes.py_object, ctypes.POINTER(_PyBuffer), ctypes.c_int]
_GetBuffer.restype = ctypes.c_int
_ReleaseBuffer = ctypes.pythonapi.PyBuffer_Release
_ReleaseBuffer.argtypes = [ctypes.POINTER(_PyBuffer)]
_ReleaseBuffer.restype = None


def _buffer_address(view: memoryview) -> int:
    """The address of a C-contiguous buffer (read-only ones too)."""
    info = _PyBuffer()
    _GetBuffer(view, ctypes.byref(info), 0)  # PyBUF_SIMPLE; raises on failure
    try:
        return int(info.buf or 0)
    finally:
        _ReleaseBuffer(ctypes.byref(info))


@dataclass(frozen=True)
class LocalMemory:
    """A contiguous range of this process's memory.

    ``keep`` is the user's object: holding it keeps the memory alive.
    ``device`` is ``"cpu"`` or a CUDA device string (``"cuda:0"``).
    """

    addr: int
    nbytes: int
    device: str
    readonly: bool
    keep: Any

    @property
    def is_cuda(self) -> bool:
        return self.device.startswith("cuda")

    def view(self, offset: int = 0, length: int | None = None) -> memoryview:
        """A writable byte view of host memory ``[offset, offset + length)``."""
        if self.is_cuda:
            raise ValueError("CUDA memory has no host view; stage it through the CPU")
        length = self.nbytes - offset if length is None else length
        return host_view(self.addr + offset, length)


def host_view(addr: int, length: int) -> memoryview:
    """A byte view of ``length`` bytes at ``addr`` (no copy, no ownership)."""
    if length == 0:
        return memoryview(bytearray(0))
    return memoryview((ctypes.c_char * length).from_address(addr)).cast("B")


def _is_tensor(obj: object) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.Tensor)


def _is_ndarray(obj: object) -> bool:
    numpy = sys.modules.get("numpy")
    return numpy is not None and isinstance(obj, numpy.ndarray)


def as_local_memory(obj: object) -> LocalMemory:
    """Validate ``obj`` and describe its memory; ``ValueError`` (Monarch's
    message) for anything that is not 1-D and contiguous."""
    if isinstance(obj, memoryview):
        if obj.ndim != 1 or not obj.c_contiguous:
            raise ValueError(_SHAPE_ERROR.format(obj))
        addr = _buffer_address(obj) if obj.nbytes else 0
        return LocalMemory(addr, obj.nbytes, "cpu", bool(obj.readonly), obj)
    if _is_tensor(obj):
        tensor: Any = obj
        if tensor.dim() != 1 or not tensor.is_contiguous():
            raise ValueError(_SHAPE_ERROR.format(tensor))
        if tensor.is_sparse or tensor.is_quantized or tensor.is_meta:
            raise ValueError(_SHAPE_ERROR.format(f"a {tensor.layout} tensor"))
        nbytes = tensor.numel() * tensor.element_size()
        device = tensor.device
        name = "cpu" if device.type == "cpu" else f"{device.type}:{device.index or 0}"
        if device.type not in ("cpu", "cuda"):
            raise ValueError(f"RDMABuffer supports CPU and CUDA tensors, not {device.type!r} ones")
        return LocalMemory(int(tensor.data_ptr()), nbytes, name, False, tensor)
    if _is_ndarray(obj):
        array: Any = obj
        if array.ndim != 1 or not array.flags.c_contiguous:
            raise ValueError(_SHAPE_ERROR.format(array))
        return LocalMemory(
            int(array.ctypes.data), int(array.nbytes), "cpu", not array.flags.writeable, array
        )
    raise ValueError(_SHAPE_ERROR.format(repr(obj)[:200]))
