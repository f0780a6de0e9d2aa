"""The ``cuda_ipc`` backend: CUDA memory between processes of one host.

The owner never exports its own memory. A CUDA IPC handle
(``cudaIpcGetMemHandle``) names a whole allocation, not a range: for a
tensor of torch's caching allocator, the whole segment it was carved from,
other tensors included; and ``cudaIpcOpenMemHandle`` always maps it
read-write (its only flag is ``cudaIpcMemLazyEnablePeerAccess``). The
driver's virtual memory API (``cuMemCreate``, exported with
``cuMemExportToShareableHandle``) does let a mapping be read-only, but the
*importer* sets that access (``cuMemSetAccess``), so it binds only an
honest importer, and it needs memory allocated that way, not the tensors
``RDMABuffer`` accepts. Handing out a handle would thus make a read-only
buffer, and the bytes around any buffer, writable by whoever holds it, and
usable after ``drop()``.

So the owner does every copy itself, on its own device, into or out of
memory the *peer* shares (operation ``CUDA_COPY``): the peer keeps a
staging allocation of its own (reused between transfers), sends its IPC
handle with the request, and copies between it and its tensor on its side.
The owner checks the range, refuses a write to a read-only buffer, holds a
use of the region for the copy and synchronizes before answering: once
``drop()`` returns, no copy of it runs. What the peer shares is its own
staging memory, which it lends for that purpose. It costs a device copy on
the peer's side and a round trip per transfer. Everything here needs torch
with CUDA; without it the errors say so.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

import monarch_rdma._backends as _backends
import monarch_rdma._control as _control

from ._backend import OwnerRequest
from ._cuda_memory import bytes_of, cuda_available, torch_module
from ._handle import Handle
from ._identity import this_host
from ._memory import LocalMemory
from ._wire import Channel, RequestError, Status, answer, readonly_message

__all__ = ["CUDA_COPY", "CudaIpcBackend", "open_shared", "share"]

CUDA_COPY = 8  # args {"handle": the peer's staging, "write": bool}: the owner copies the range
IDLE_STAGING = 4  # staging allocations a peer keeps per device for reuse


def share(tensor: Any) -> list[Any]:
    """The CUDA IPC description of ``tensor``'s storage, as JSON can carry it."""
    shared = tensor.untyped_storage()._share_cuda_()
    return [item.hex() if isinstance(item, bytes) else item for item in shared]


def open_shared(items: list[Any]) -> Any:
    """A flat uint8 tensor over the storage another process shared with :func:`share`."""
    torch = torch_module()
    args = [bytes.fromhex(item) if isinstance(item, str) else item for item in items]
    storage = torch.UntypedStorage._new_shared_cuda(*args)
    flat = torch.empty(0, dtype=torch.uint8, device=storage.device)
    flat.set_(storage, 0, (storage.nbytes(),), (1,))
    return flat


def _serve_copy(chan: Channel, request: OwnerRequest) -> None:
    """Owner side of ``CUDA_COPY``: copy the range between the region and
    the peer's shared staging memory, under a use of the region."""
    region = request.registered()
    memory = region.memory
    write = request.args.get("write")
    items = request.args.get("handle")
    if not isinstance(write, bool) or not isinstance(items, list):
        raise RequestError(Status.BAD_REQUEST, "CUDA_COPY needs a shared handle and a direction")
    if not memory.is_cuda:
        raise RequestError(Status.BAD_REQUEST, "cuda_ipc copies CUDA memory; this is host memory")
    if write and memory.readonly:
        raise RequestError(Status.READONLY, readonly_message(request.buffer_id))
    offset, length = request.offset, request.length
    if offset + length > memory.nbytes:
        raise RequestError(
            Status.BOUNDS,
            f"{length} bytes at offset {offset} are out of bounds of buffer "
            f"{request.buffer_id} ({memory.nbytes} bytes)",
        )
    torch = torch_module()
    theirs = open_shared(items)
    if theirs.numel() < length:
        raise RequestError(
            Status.BAD_REQUEST, "the shared staging memory is smaller than the range"
        )
    mine = bytes_of(memory)[offset : offset + length]
    with region.touching():  # drop() waits for the copy, synchronized, to end
        if write:
            mine.copy_(theirs[:length])
        else:
            theirs[:length].copy_(mine)
        torch.cuda.synchronize(mine.device)
    answer(chan, Status.OK)


class CudaIpcBackend:
    """Device copies the owner makes between its memory and the peer's staging."""

    name = "cuda_ipc"

    def __init__(self) -> None:
        self._idle: dict[str, list[Any]] = {}  # device -> staging tensors not in use
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

    def _take(self, device: str, nbytes: int) -> Any:
        with self._lock:
            idle = self._idle.get(device, [])
            fits = [t for t in idle if t.numel() >= nbytes]
            if fits:
                staging = min(fits, key=lambda t: t.numel())
                idle.remove(staging)
                return staging
        torch = torch_module()
        return torch.empty(max(nbytes, 1), dtype=torch.uint8, device=device)

    def _give(self, device: str, staging: Any) -> None:
        with self._lock:
            idle = self._idle.setdefault(device, [])
            idle.append(staging)
            idle.sort(key=lambda t: t.numel())
            del idle[IDLE_STAGING:]

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
        device = local.device if local.is_cuda else handle.device
        if local.is_cuda:
            mine = bytes_of(local)[:nbytes]
        else:
            mine = torch.frombuffer(local.view(0, nbytes), dtype=torch.uint8)
        staging = self._take(device, nbytes)
        try:
            if write:
                staging[:nbytes].copy_(mine)
                torch.cuda.synchronize(staging.device)
            _control.request(handle, CUDA_COPY, deadline, {"handle": share(staging),
                             "write": write}, remote_offset, nbytes)  # fmt: skip
            if not write:
                mine.copy_(staging[:nbytes])
                torch.cuda.synchronize(staging.device)
        finally:
            self._give(device, staging)


_backends.register(
    _backends.Registration(CudaIpcBackend(), rank=10, owner_ops={CUDA_COPY: _serve_copy})
)
