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
Since a token is checked against the owner's own slot, a same-host peer
learns what the *owner* registered, not what a (possibly altered) handle
claims.

Lifetime is the owner's too. Everything that touches a region's memory on
the owner's behalf holds a *use* of it while it does (:meth:`RegionTable.touching`:
a tcp request's copy, a same-host write the owner copies in, an atomic), and
a same-host reader that copies out one-sidedly holds a *lease* (granted by
the owner's server, bounded in time, released with its connection at the
latest). ``drop()`` first makes the region unknown (no new use or lease is
granted, the token slot is zeroed), then waits until every use has ended
and every lease is released or expired: once it returns, no transfer the
owner serves touches the memory again. A use is held only while memory is
copied (never while a socket waits), so ``drop()`` waits for at most one
piece of each copy in progress.
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import logging
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ._errors import RDMABufferDropped
from ._handle import Handle, OwnerInfo
from ._memory import LocalMemory

__all__ = ["LEASE_MAX", "WRITABLE", "Region", "RegionTable", "dropped_error", "writable_token"]

log = logging.getLogger("monarch.rdma.server")
SLOTS_PER_TABLE = 1024
WRITABLE = 2  # token bit: the owner accepts writes to this region
LEASE_MAX = 60.0  # seconds one lease may last, however long the reader asks for


def dropped_error(buffer_id: int) -> RDMABufferDropped:
    """The error of a use or lease asked for after ``drop()`` began."""
    return RDMABufferDropped(
        f"buffer {buffer_id} is not registered at its owner: it was dropped (RDMABuffer.drop()) "
        "or its owner restarted"
    )


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
    # the owner's own copies in progress, and same-host readers' leases (id -> expiry,
    # ``time.monotonic()``); ``drop()`` waits for both (guarded by the table's lock)
    uses: int = 0
    leases: dict[int, float] = field(default_factory=dict)
    dropped: bool = False
    table: RegionTable | None = field(default=None, repr=False, compare=False)

    def touching(self) -> contextlib.AbstractContextManager[None]:
        """:meth:`RegionTable.touching` of this region, in its own table."""
        if self.table is None:  # never registered (a stand-in): nothing waits for it
            return contextlib.nullcontext()
        return self.table.touching(self)


class RegionTable:
    """The regions one process registered, by buffer id."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._changed = threading.Condition(self.lock)  # a use ended or a lease was released
        self._lease_ids = itertools.count(1)
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
            self.regions[buffer_id] = Region(buffer_id, token, memory, slot, table=self)
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

    @contextlib.contextmanager
    def touching(self, region: Region) -> Iterator[None]:
        """Hold a use of ``region`` while the block copies its memory.

        Raises:
            RDMABufferDropped: ``drop()`` has begun; nothing may touch it.
        """
        with self.lock:
            if region.dropped:
                raise dropped_error(region.buffer_id)
            region.uses += 1
        try:
            yield
        finally:
            with self.lock:
                region.uses -= 1
                if region.dropped and not region.uses:
                    self._changed.notify_all()

    def lease(self, region: Region, seconds: float) -> int:
        """Grant a same-host reader a lease of ``region`` for at most
        ``seconds`` (and ``LEASE_MAX``): ``drop()`` waits for it until it is
        released or expires. Returns its id, for :meth:`release`.

        Raises:
            RDMABufferDropped: ``drop()`` has begun.
        """
        with self.lock:
            if region.dropped:
                raise dropped_error(region.buffer_id)
            lease = next(self._lease_ids)
            region.leases[lease] = time.monotonic() + max(0.0, min(seconds, LEASE_MAX))
            return lease

    def release(self, region: Region, lease: int) -> None:
        """End a lease (a second release of it is harmless)."""
        with self.lock:
            if region.leases.pop(lease, None) is not None and region.dropped:
                self._changed.notify_all()

    def drop(self, buffer_id: int, token: int) -> bool:
        """Release a registration; False if it was not registered (dropped twice).

        Returns once nothing the owner serves touches the memory any more:
        the owner's copies in progress have finished their current piece (the
        rest of them is refused), and every same-host reader's lease is
        released or expired (a lease past its expiry is logged)."""
        with self.lock:
            region = self.regions.get(buffer_id)
            if region is None or region.token != token:
                return False
            del self.regions[buffer_id]
            region.dropped = True
            region.slot.value = 0
            while region.uses or region.leases:
                now = time.monotonic()
                live = [expiry for expiry in region.leases.values() if expiry > now]
                if not region.uses and not live:
                    log.warning(
                        "dropped RDMA buffer %d while %d same-host reader(s) still held a lease "
                        "past its expiry (stopped or stuck?): they may read memory the owner "
                        "lets go of",
                        buffer_id,
                        len(region.leases),
                    )
                    region.leases.clear()
                    break
                # a use lasts one piece of a copy; a lease at most until it expires
                self._changed.wait(None if region.uses or not live else min(live) - now)
            self.free_slots.append(region.slot)
        for cleanup in region.cleanups:
            cleanup()
        return True
