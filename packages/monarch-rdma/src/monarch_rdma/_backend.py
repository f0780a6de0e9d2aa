"""The ``RdmaBackend`` interface and how a backend is chosen.

The side that starts a transfer (the reader or writer) chooses, per pair of
endpoints, from what the buffer's handle says about its owner:

1. ``MONARCH_RDMA_BACKEND`` / ``configure(backend=...)``, when set, always
   (a clear error if it cannot reach this buffer);
2. ``cuda_ipc`` when CUDA memory is on the owner's side and both are on one host;
3. ``cma`` for host memory on the same host (and pid namespace);
4. ``ibverbs`` when both sides have a usable RDMA device;
5. ``tcp`` otherwise, unless ``allow_tcp_fallback`` is off.

If the kernel refuses cross-memory attach to an owner, that owner is served
by ``tcp`` from then on (with an ``RDMATcpFallbackWarning``).
"""

from __future__ import annotations

import warnings
from typing import Protocol, runtime_checkable

from ._cma import CmaBackend, CmaDenied
from ._config import get_config
from ._cuda import CudaIpcBackend
from ._errors import RDMABackendUnavailable, RDMATcpFallbackWarning
from ._ibverbs import IbverbsBackend
from ._memory import LocalMemory
from ._registry import Handle, host_key
from ._tcp import TcpBackend

__all__ = ["RdmaBackend", "backends", "choose", "run_transfer"]


@runtime_checkable
class RdmaBackend(Protocol):
    """One way of moving bytes between local memory and a registered region.

    The owner's side of every backend is the registry (``register`` on
    ``RDMABuffer(...)``, ``deregister`` on ``drop()``) plus what a backend
    attaches to a region on first use (an ibverbs MR, a CUDA IPC handle),
    released with the registration.
    """

    name: str

    def available(self) -> bool:
        """Whether this process can use the backend at all."""
        ...

    def unsupported(self, handle: Handle, local: LocalMemory) -> str | None:
        """Why this backend cannot move between ``local`` and ``handle`` (None: it can)."""
        ...

    def transfer(
        self,
        handle: Handle,
        local: LocalMemory,
        remote_offset: int,
        nbytes: int,
        write: bool,
        deadline: float,
    ) -> None:
        """Move ``nbytes``: remote ``[remote_offset, +nbytes)`` to or from the
        start of ``local``; raise an ``RDMAError`` on failure, never after
        ``deadline`` (a ``time.monotonic()`` value) has long passed."""
        ...


_backends: dict[str, RdmaBackend] | None = None
_host: str | None = None


def _this_host() -> str:
    global _host
    if _host is None:
        _host = host_key()
    return _host


def backends() -> dict[str, RdmaBackend]:
    global _backends
    if _backends is None:
        _backends = {
            "ibverbs": IbverbsBackend(),
            "cma": CmaBackend(),
            "tcp": TcpBackend(),
            "cuda_ipc": CudaIpcBackend(),
        }
    return _backends


AUTO_ORDER = ("cuda_ipc", "cma", "ibverbs", "tcp")
TCP_FALLBACK_MESSAGE = (
    "No ibverbs RDMA hardware detected. Falling back to TCP transport, which has "
    "significantly lower throughput and higher latency than native RDMA. To disable this "
    "fallback and fail explicitly, call monarch_rdma.configure(allow_tcp_fallback=False)."
)


def choose(handle: Handle, local: LocalMemory, warn: bool = True) -> RdmaBackend:
    """The backend for a transfer between ``local`` and ``handle``'s region."""
    config = get_config()
    table = backends()
    if config.backend != "auto":
        backend = table[config.backend]
        reason = backend.unsupported(handle, local)
        if reason is not None:
            raise RDMABackendUnavailable(
                f"the {config.backend!r} RDMA backend is configured (MONARCH_RDMA_BACKEND or "
                f"configure(backend=...)) but cannot reach buffer {handle.buffer_id}: {reason}. "
                "Use backend='auto' to choose automatically."
            )
        return backend
    reasons = []
    for name in AUTO_ORDER:
        if name == "cma" and config.disable_cma:
            continue
        if name == "tcp" and not config.allow_tcp_fallback:
            reasons.append("tcp: the TCP fallback is disabled (allow_tcp_fallback=False)")
            continue
        backend = table[name]
        reason = backend.unsupported(handle, local)
        if reason is None:
            if warn and name == "tcp" and handle.owner.host_key != _this_host():
                warnings.warn(TCP_FALLBACK_MESSAGE, RDMATcpFallbackWarning, stacklevel=4)
            return backend
        reasons.append(f"{name}: {reason}")
    raise RDMABackendUnavailable(
        f"no RDMA backend can reach buffer {handle.buffer_id} (owner pid {handle.owner.pid} on "
        f"{handle.owner.hostname}): " + "; ".join(reasons) + ". To enable the TCP fallback, call "
        "monarch_rdma.configure(allow_tcp_fallback=True) (Monarch: "
        "monarch.configure(rdma_allow_tcp_fallback=True))."
    )


def run_transfer(
    handle: Handle,
    local: LocalMemory,
    remote_offset: int,
    nbytes: int,
    write: bool,
    deadline: float,
    backend: RdmaBackend | None = None,
) -> None:
    backend = backend or choose(handle, local)
    try:
        backend.transfer(handle, local, remote_offset, nbytes, write, deadline)
    except CmaDenied as error:
        if get_config().backend == "cma":
            raise RDMABackendUnavailable(
                f"the 'cma' backend is configured but the kernel refuses process_vm_readv to "
                f"pid {handle.owner.pid}: {error}"
            ) from error
        run_transfer(handle, local, remote_offset, nbytes, write, deadline, choose(handle, local))
