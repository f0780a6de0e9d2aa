"""CUDA memory seen from host code: copies to and from host memory, staging
for backends that move host memory only, and Monarch's allocator advice.

torch is optional: it is imported by name (type checking does not need it),
and where it is missing the errors say so.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import warnings
from collections.abc import Iterator
from typing import Any

from ._errors import RDMABackendUnavailable
from ._memory import LocalMemory, host_view

__all__ = [
    "bytes_of",
    "check_allocator",
    "cuda_available",
    "from_host",
    "staged",
    "to_host",
    "torch_module",
]


def torch_module() -> Any:
    """torch, or ``RDMABackendUnavailable`` saying it is needed."""
    try:
        return importlib.import_module("torch")
    except ImportError:
        raise RDMABackendUnavailable("CUDA transfers need torch, which is not installed") from None


def cuda_available() -> bool:
    """Whether torch is loaded and sees a CUDA device (never imports torch)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    try:
        return bool(torch.cuda.is_available())
    except Exception:
        return False


def bytes_of(memory: LocalMemory) -> Any:
    """The tensor behind ``memory`` as a flat uint8 tensor."""
    torch = torch_module()
    return memory.keep.view(torch.uint8) if memory.keep.dtype != torch.uint8 else memory.keep


def to_host(memory: LocalMemory, offset: int, length: int) -> tuple[Any, memoryview]:
    """Copy CUDA bytes to a host staging tensor; (tensor to keep alive, its view)."""
    staging = bytes_of(memory)[offset : offset + length].to("cpu")
    return staging, host_view(int(staging.data_ptr()), length)


def from_host(memory: LocalMemory, offset: int, data: memoryview) -> None:
    """Copy host bytes into CUDA ``memory`` at ``offset`` (synchronously)."""
    torch = torch_module()
    host = torch.frombuffer(data, dtype=torch.uint8) if len(data) else torch.empty(0)
    bytes_of(memory)[offset : offset + len(data)].copy_(host)
    torch.cuda.synchronize(memory.device)


@contextlib.contextmanager
def staged(local: LocalMemory, nbytes: int, write: bool) -> Iterator[LocalMemory]:
    """A host copy of CUDA ``local`` for a backend that moves host memory:
    filled from the device before a write, copied back after a read."""
    torch = torch_module()
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=cuda_available())
    device_bytes = bytes_of(local)[:nbytes]
    if write:
        host.copy_(device_bytes)
    yield LocalMemory(int(host.data_ptr()), nbytes, "cpu", False, host)
    if not write:
        device_bytes.copy_(host)
        torch.cuda.synchronize(local.device)


_allocator_checked = False


def check_allocator() -> None:
    """Monarch's advice for CUDA buffers: warn (once per process) without
    expandable segments."""
    global _allocator_checked
    if _allocator_checked:
        return
    _allocator_checked = True
    torch = torch_module()
    try:
        settings = torch.cuda.memory._snapshot().get("allocator_settings", {})
        expandable = bool(settings.get("expandable_segments", False))
    except Exception:
        expandable = False
    if not expandable:
        warnings.warn(
            "CUDA caching allocator is not using expandable segments.\n"
            "This is required to maximize RDMA performance with CUDA tensors.\n"
            'Set PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True" before importing torch.',
            UserWarning,
            stacklevel=3,
        )
