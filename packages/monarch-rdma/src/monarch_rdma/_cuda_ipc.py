"""The ``cuda_ipc`` backend: CUDA memory between processes of one host.

The owner shares the storage behind its tensor with a CUDA IPC handle,
asked for once over its data-plane server (operation ``CUDA_IPC``), then
cached by the reader; the reader opens it and copies with ``torch`` on the
device (GPU to GPU, or GPU to host). Everything here needs torch with CUDA;
without it the errors say so.

An IPC handle maps the owner's memory read-write; the owner cannot restrict
that mapping, so it says in its answer whether it registered the memory
writable, and the reader refuses writes to a buffer its owner calls
read-only (a handle that claims otherwise changes nothing).
"""

from __future__ import annotations

import sys
import threading
from typing import Any

import monarch_rdma._backends as _backends
import monarch_rdma._control as _control

from ._backend import OwnerRequest
from ._cuda_memory import bytes_of, cuda_available, torch_module
from ._errors import RDMABackendUnavailable, RDMATransferError
from ._handle import Handle
from ._identity import this_host
from ._memory import LocalMemory
from ._regions import Region
from ._wire import Channel, answer_json, readonly_message

__all__ = ["CUDA_IPC", "CudaIpcBackend", "owner_share"]

CUDA_IPC = 8  # data-plane operation: answer the CUDA IPC handle of the buffer's storage


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
        "writable": not memory.readonly,
    }


def _serve_share(chan: Channel, request: OwnerRequest) -> None:
    answer_json(chan, owner_share(request.registered()))


class CudaIpcBackend:
    """Device copies through a CUDA IPC handle to the owner's storage."""

    name = "cuda_ipc"

    def __init__(self) -> None:
        self._opened: dict[tuple[str, int, int, int], tuple[Any, bool]] = {}  # view, writable
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
        if handle.owner.host_key != this_host():
            return "cuda_ipc works between processes of one host only"
        return None

    def _remote(self, handle: Handle, deadline: float) -> tuple[Any, bool]:
        """The owner's memory opened here, and whether its owner lets us write it."""
        owner = handle.owner
        key = (owner.host_key, owner.pid, handle.buffer_id, handle.token)
        with self._lock:
            opened = self._opened.get(key)
        if opened is None:
            torch = torch_module()
            _, answer = _control.request(handle, CUDA_IPC, deadline)
            args = [
                bytes.fromhex(item) if isinstance(item, str) else item for item in answer["handle"]
            ]
            storage = torch.UntypedStorage._new_shared_cuda(*args)
            flat = torch.empty(0, dtype=torch.uint8, device=storage.device)
            flat.set_(storage, 0, (storage.nbytes(),), (1,))
            view = flat[int(answer["offset"]) : int(answer["offset"]) + handle.nbytes]
            opened = (view, bool(answer.get("writable", True)))
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
        torch = torch_module()
        opened, writable = self._remote(handle, deadline)
        if write and not writable:
            raise RDMATransferError(readonly_message(handle.buffer_id))
        remote = opened[remote_offset : remote_offset + nbytes]
        if local.is_cuda:
            mine = bytes_of(local)[:nbytes]
        else:
            mine = torch.frombuffer(local.view(0, nbytes), dtype=torch.uint8)
        if write:
            remote.copy_(mine)
        else:
            mine.copy_(remote)
        torch.cuda.synchronize(remote.device)


_backends.register(
    _backends.Registration(CudaIpcBackend(), rank=10, owner_ops={CUDA_IPC: _serve_share})
)
