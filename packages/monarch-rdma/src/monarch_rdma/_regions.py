"""The owner's table of registered regions.

Each registration gets a random 64-bit *token*, written into a slot of a
table in this process's memory. A reader on the same host checks the slot
(one ``process_vm_readv`` of 8 bytes) instead of asking the owner, so a
dropped buffer, or a pid reused by another process, is an error and not a
read of a stranger's memory. ``drop()`` zeroes the slot. A token is never
reused, so once a slot stops holding a handle's token it never holds it
again.

A token also says whether the owner lets its region be written: bit 1
(``WRITABLE``) is set only for a region registered from writable memory.
Since a token is checked against the owner's own slot, a same-host writer
learns what the *owner* registered, not what a (possibly altered) handle
claims.
"""

from __future__ import annotations

import ctypes
import itertools
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ._handle import Handle, OwnerInfo
from ._memory import LocalMemory

__all__ = ["WRITABLE", "Region", "RegionTable", "writable_token"]

SLOTS_PER_TABLE = 1024
WRITABLE = 2  # token bit: the owner accepts writes to this region


def writable_token(token: int) -> bool:
    """Whether a region's token says its owner accepts writes."""
    return bool(token & WRITABLE)


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


class RegionTable:
    """The regions one process registered, by buffer id."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.atomic_lock = threading.Lock()  # fetch_add / compare_and_swap
        self.regions: dict[int, Region] = {}
        self.ids = itertools.count(1)
        self.tables: list[Any] = []  # ctypes arrays, never freed: readers may look at a slot
        self.free_slots: list[ctypes.c_uint64] = []

    def _slot(self) -> ctypes.c_uint64:
        if not self.free_slots:
            table = (ctypes.c_uint64 * SLOTS_PER_TABLE)()
            self.tables.append(table)
            base = ctypes.addressof(table)
            self.free_slots = [
                ctypes.c_uint64.from_address(base + 8 * i) for i in reversed(range(SLOTS_PER_TABLE))
            ]
        return self.free_slots.pop()

    def register(self, memory: LocalMemory, owner: OwnerInfo) -> Handle:
        """Register ``memory``; the handle names ``owner`` as its owner."""
        with self.lock:
            buffer_id = next(self.ids)
            token = (secrets.randbits(64) | 1) & ~WRITABLE  # odd: never 0, the dropped slot
            if not memory.readonly:
                token |= WRITABLE
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
        """The region, if ``token`` is still its registration's."""
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
