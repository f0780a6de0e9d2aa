"""What a pickled ``RDMABuffer`` carries: the region's :class:`Handle` and its
owner's :class:`OwnerInfo`. Plain frozen data, a few hundred bytes pickled;
nothing here does I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Handle", "OwnerInfo"]


@dataclass(frozen=True)
class OwnerInfo:
    """Where the owner process is and how it can be reached.

    ``features`` holds what each backend advertised when the owner registered
    its first region (``("cma", True)``, ``("ibverbs", False)``, ...): the
    core carries them without knowing what they mean; each backend reads its
    own with :meth:`feature`.
    """

    name: str  # shown as RDMABuffer.owner
    host_key: str
    hostname: str
    pid: int
    start_time: int
    server: tuple[str, int]  # the owner's data-plane server (control requests, tcp data)
    features: tuple[tuple[str, Any], ...] = ()
    # the same server's Unix socket, for peers of the owner's host ("": none); there the
    # owner learns the peer's pid from the kernel (same-host writes, ALLOW_ATTACH, leases)
    local: str = ""

    def feature(self, name: str, default: Any = None) -> Any:
        """What the backend that owns ``name`` advertised for this owner."""
        for key, value in self.features:
            if key == name:
                return value
        return default


@dataclass(frozen=True)
class Handle:
    """The small picklable description of one registered region."""

    buffer_id: int
    token: int
    nbytes: int
    addr: int
    device: str
    readonly: bool
    slot_addr: int  # where the owner keeps ``token`` while the region is registered
    owner: OwnerInfo

    @property
    def is_cuda(self) -> bool:
        return self.device.startswith("cuda")
