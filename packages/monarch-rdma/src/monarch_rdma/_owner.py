"""This process as an owner: its table of regions, its data-plane server
and the :class:`OwnerInfo` every handle it gives out carries.

The server starts, and each backend is asked what to advertise, on the
first registration, so a process that only reads never listens.
"""

from __future__ import annotations

import os
import socket
import threading

import monarch_rdma._backends as _backends
import monarch_rdma._server as _server
from monarch_actor.extension import process_address

from ._handle import Handle, OwnerInfo
from ._identity import host_key, process_start_time
from ._memory import LocalMemory
from ._regions import RegionTable

__all__ = ["Owner", "current", "local_owner", "register", "regions"]


class Owner:
    """One process's regions, and how others reach them."""

    def __init__(self) -> None:
        self.regions = RegionTable()
        self.info: OwnerInfo | None = None
        self._lock = threading.Lock()

    def owner_info(self) -> OwnerInfo:
        """This process as an owner; starts the data-plane server on first use."""
        info = self.info
        if info is not None:
            return info
        with self._lock:
            if self.info is None:
                server = _server.start(self.regions)
                pid = os.getpid()
                self.info = OwnerInfo(
                    name=_owner_name(pid),
                    host_key=host_key(),
                    hostname=socket.gethostname(),
                    pid=pid,
                    start_time=process_start_time(pid),
                    server=server.address,
                    features=_backends.advertised(),
                    local=server.local,
                )
            return self.info

    def register(self, memory: LocalMemory) -> Handle:
        handle = self.regions.register(memory, self.owner_info())
        region = self.regions.lookup(handle.buffer_id, handle.token)
        for registration in _backends.in_selection_order():
            if registration.on_register is not None and region is not None:
                registration.on_register(region)
        return handle


def _owner_name(pid: int) -> str:
    # the actor runtime's address names this process best, when it runs
    where = process_address() or f"{socket.gethostname()}:{pid}"
    return f"rdma_manager[pid {pid}]@{where}"


_current = Owner()


def current() -> Owner:
    return _current


def regions() -> RegionTable:
    """The regions this process registered."""
    return _current.regions


def register(memory: LocalMemory) -> Handle:
    """Register ``memory`` in this process (``RDMABuffer(...)``)."""
    return _current.register(memory)


def local_owner() -> OwnerInfo | None:
    """This process's owner info if it has registered anything."""
    return _current.info


def _after_fork() -> None:
    # a forked child owns nothing: the parent's server thread is not running in it
    global _current
    _current = Owner()


os.register_at_fork(after_in_child=_after_fork)
