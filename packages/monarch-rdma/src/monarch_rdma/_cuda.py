"""CUDA memory: the ``cuda_ipc`` backend and staging for the others.

``cuda_ipc`` moves CUDA memory between processes of one host: the owner
shares the storage behind its tensor with a CUDA IPC handle (asked for once
over the data-plane server, then cached by the reader); the reader opens it
and copies with ``torch`` on the device (GPU to GPU, or GPU to host).
The ``tcp`` backend carries CUDA memory through host staging buffers.
Everything here needs torch with CUDA; without it the errors say so.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import threading
from collections.abc import Iterator
from typing import Any

from ._errors import RDMABackendUnavailable
from ._memory import LocalMemory, host_view
from ._registry import Handle, Region, host_key

__all__ = ["CudaIpcBackend", "from_host", "owner_share", "staged", "to_host"]


def _torch() -> Any:
    try:  # torch is optional: imported by name, so type checking does not need it
        return importlib.import_module("torch")
    except ImportError:
        raise RDMABackendUnavailable("CUDA transfers need torch, which is not installed") from None


def cuda_available() -> bool:
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    try:
        return bool(torch.cuda.is_available())
    except Exception:
        return False


def _bytes_of(memory: LocalMemory) -> Any:
    """The tensor behind ``memory`` as a flat uint8 tensor."""
    torch = _torch()
    return memory.keep.view(torch.uint8) if memory.keep.dtype != torch.uint8 else memory.keep


def to_host(memory: LocalMemory, offset: int, length: int) -> tuple[Any, memoryview]:
    """Copy CUDA bytes to a host staging tensor; (tensor to keep alive, its view)."""
    staging = _bytes_of(memory)[offset : offset + length].to("cpu")
    return staging, host_view(int(staging.data_ptr()), length)


def from_host(memory: LocalMemory, offset: int, data: memoryview) -> None:
    torch = _torch()
    host = torch.frombuffer(data, dtype=torch.uint8) if len(data) else torch.empty(0)
    _bytes_of(memory)[offset : offset + len(data)].copy_(host)
    torch.cuda.synchronize(memory.device)


@contextlib.contextmanager
def staged(local: LocalMemory, nbytes: int, write: bool) -> Iterator[LocalMemory]:
    """A host copy of CUDA ``local`` for a backend that moves host memory:
    filled from the device before a write, copied back after a read."""
    torch = _torch()
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=cuda_available())
    device_bytes = _bytes_of(local)[:nbytes]
    if write:
        host.copy_(device_bytes)
    yield LocalMemory(int(host.data_ptr()), nbytes, "cpu", False, host)
    if not write:
        device_bytes.copy_(host)
        torch.cuda.synchronize(local.device)


def owner_share(region: Region) -> dict[str, Any]:
    """The CUDA IPC handle of the storage behind ``region`` (on the owner)."""
    memory = region.memory
    if not memory.is_cuda:
        raise RDMABackendUnavailable("cuda_ipc shares CUDA memory; this buffer is host memory")
    storage = memory.keep.untyped_storage()
    shared = storage._share_cuda_()
    offset = memory.addr - int(storage.data_ptr())
    return {
        "handle": [item.hex() if isinstance(item, bytes) else item for item in shared],
        "offset": offset,
    }


class CudaIpcBackend:
    name = "cuda_ipc"

    def __init__(self) -> None:
        self._host = host_key()
        self._opened: dict[tuple[str, int, int, int], Any] = {}
        self._lock = threading.Lock()

    def available(self) -> bool:
        return cuda_available()

    def unsupported(self, handle: Handle, local: LocalMemory) -> str | None:
        if not cuda_available():
            return (
                "CUDA IPC is not available: torch is not installed"
                if "torch" not in sys.modules
                else "CUDA IPC is not available: torch sees no CUDA device"
            )
        if not handle.is_cuda:
            return "cuda_ipc moves CUDA memory; the remote buffer is host memory"
        if handle.owner.host_key != self._host:
            return "cuda_ipc works between processes of one host only"
        return None

    def _remote(self, handle: Handle, deadline: float) -> Any:
        from . import _tcp
        from ._wire import Op

        owner = handle.owner
        key = (owner.host_key, owner.pid, handle.buffer_id, handle.token)
        with self._lock:
            opened = self._opened.get(key)
        if opened is None:
            torch = _torch()
            _, answer = _tcp.request(handle, Op.CUDA_IPC, deadline)
            args = [
                bytes.fromhex(item) if isinstance(item, str) else item for item in answer["handle"]
            ]
            storage = torch.UntypedStorage._new_shared_cuda(*args)
            flat = torch.empty(0, dtype=torch.uint8, device=storage.device)
            flat.set_(storage, 0, (storage.nbytes(),), (1,))
            opened = flat[int(answer["offset"]) : int(answer["offset"]) + handle.nbytes]
            with self._lock:
                self._opened[key] = opened
        return opened

    def transfer(
        self,
        handle: Handle,
        local: LocalMemory,
        remote_offset: int,
        nbytes: int,
        write: bool,
        deadline: float,
    ) -> None:
        torch = _torch()
        remote = self._remote(handle, deadline)[remote_offset : remote_offset + nbytes]
        if local.is_cuda:
            mine = _bytes_of(local)[:nbytes]
        else:
            mine = torch.frombuffer(local.view(0, nbytes), dtype=torch.uint8)
        if write:
            remote.copy_(mine)
        else:
            mine.copy_(remote)
        torch.cuda.synchronize(remote.device)


def check_allocator(memory: LocalMemory) -> None:
    """Monarch's advice for CUDA buffers: warn (once) without expandable segments."""
    import warnings

    torch = _torch()
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
