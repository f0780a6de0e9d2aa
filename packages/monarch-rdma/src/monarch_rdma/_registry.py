"""The owner's side: the regions this process has registered, the handle
that describes one to other processes, and this process's identity.

Each registration gets a random 64-bit *token*, written into a slot of a
table in this process's memory. A reader on the same host checks the slot
(one ``process_vm_readv`` of 8 bytes) before it touches the memory, so a
dropped buffer, or a pid reused by another process, is an error and not a
read of stranger's memory. ``drop()`` zeroes the slot.
"""

from __future__ import annotations

import ctypes
import itertools
import os
import secrets
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ._memory import LocalMemory

__all__ = [
    "Handle",
    "OwnerInfo",
    "Region",
    "host_key",
    "local_owner",
    "process_start_time",
    "registry",
]

SLOTS_PER_TABLE = 1024


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def host_key() -> str:
    """Same value in two processes iff ``process_vm_readv`` can name one from
    the other: same boot of the same kernel and the same pid namespace."""
    boot = _read("/proc/sys/kernel/random/boot_id") or socket.gethostname()
    try:
        pid_ns = str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        pid_ns = "?"
    return f"{boot}/{pid_ns}"


def process_start_time(pid: int) -> int:
    """Clock ticks after boot at which ``pid`` started (0 if unknown)."""
    stat = _read(f"/proc/{pid}/stat")
    if not stat:
        return 0
    try:
        return int(stat.rsplit(")", 1)[1].split()[19])
    except (IndexError, ValueError):
        return 0


@dataclass(frozen=True)
class OwnerInfo:
    """Where the owner process is and how it can be reached."""

    name: str  # shown as RDMABuffer.owner
    host_key: str
    hostname: str
    pid: int
    start_time: int
    tcp: tuple[str, int]  # the data-plane server
    cma_ready: bool  # the owner allowed ptrace-style access (process_vm_*) by its peers
    ibverbs: bool  # the owner can serve ibverbs connections


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


@dataclass
class Region:
    """A registered region, on its owner."""

    buffer_id: int
    token: int
    memory: LocalMemory
    slot: ctypes.c_uint64
    # what backends attached (an ibverbs MR, a CUDA IPC handle), released on drop
    extras: dict[str, Any] = field(default_factory=dict)
    cleanups: list[Callable[[], None]] = field(default_factory=list)


class Registry:
    """This process's registered regions."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.atomic_lock = threading.Lock()  # fetch_add / compare_and_swap
        self.regions: dict[int, Region] = {}
        self.ids = itertools.count(1)
        self.tables: list[Any] = []  # ctypes arrays, never freed: readers may look at a slot
        self.free_slots: list[ctypes.c_uint64] = []
        self._owner: OwnerInfo | None = None

    def _slot(self) -> ctypes.c_uint64:
        if not self.free_slots:
            table = (ctypes.c_uint64 * SLOTS_PER_TABLE)()
            self.tables.append(table)
            base = ctypes.addressof(table)
            self.free_slots = [
                ctypes.c_uint64.from_address(base + 8 * i) for i in reversed(range(SLOTS_PER_TABLE))
            ]
        return self.free_slots.pop()

    def register(self, memory: LocalMemory) -> Handle:
        owner = self.owner()
        with self.lock:
            buffer_id = next(self.ids)
            token = secrets.randbits(64) | 1
            slot = self._slot()
            slot.value = token
            self.regions[buffer_id] = Region(buffer_id, token, memory, slot)
        return Handle(
            buffer_id,
            token,
            memory.nbytes,
            memory.addr,
            memory.device,
            memory.readonly,
            ctypes.addressof(slot),
            owner,
        )

    def lookup(self, buffer_id: int, token: int) -> Region | None:
        region = self.regions.get(buffer_id)
        return region if region is not None and region.token == token else None

    def drop(self, buffer_id: int, token: int) -> bool:
        """Release a registration; False if it was not registered (dropped twice)."""
        with self.lock:
            region = self.regions.get(buffer_id)
            if region is None or region.token != token:
                return False
            del self.regions[buffer_id]
            region.slot.value = 0
            self.free_slots.append(region.slot)
        for cleanup in region.cleanups:
            cleanup()
        return True

    def owner(self) -> OwnerInfo:
        """This process as an owner; starts the data-plane server on first use."""
        owner = self._owner
        if owner is not None:
            return owner
        from . import _cma, _ibverbs, _server

        with self.lock:
            if self._owner is None:
                server = _server.start(self)
                pid = os.getpid()
                self._owner = OwnerInfo(
                    name=_owner_name(pid),
                    host_key=host_key(),
                    hostname=socket.gethostname(),
                    pid=pid,
                    start_time=process_start_time(pid),
                    tcp=server.address,
                    cma_ready=_cma.allow_peers(),
                    ibverbs=_ibverbs.available(),
                )
            return self._owner


def _owner_name(pid: int) -> str:
    try:  # the actor runtime's address names this process best, when it runs
        from monarch_actor._runtime import maybe_runtime

        runtime = maybe_runtime()
    except ImportError:  # pragma: no cover - monarch-actor is a dependency
        runtime = None
    where = runtime.address if runtime is not None else f"{socket.gethostname()}:{pid}"
    return f"rdma_manager[pid {pid}]@{where}"


_registry = Registry()


def registry() -> Registry:
    return _registry


def local_owner() -> OwnerInfo | None:
    """This process's owner info if it has registered anything."""
    return _registry._owner


def _after_fork() -> None:
    # a forked child owns nothing: the parent's server thread is not running in it
    global _registry
    _registry = Registry()


os.register_at_fork(after_in_child=_after_fork)
