"""The ``RdmaBackend`` interface: what every backend implements.

A backend has two sides. The *transfer side* (:class:`RdmaBackend`) runs in
the process that starts a transfer and moves the bytes. The *owner side* is
the registry of regions every owner keeps, plus operations a backend adds to
the owner's data-plane server (:data:`OwnerOp`): an ibverbs queue-pair
exchange, a CUDA IPC handle, the tcp data requests. How a backend is made
known to the rest of the package is in ``_backends``.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ._wire import Channel, Payload, RequestError, Status, dropped_message

if TYPE_CHECKING:
    from ._handle import Handle
    from ._memory import LocalMemory
    from ._regions import Region

__all__ = [
    "ConnectionResources",
    "OwnerOp",
    "OwnerRequest",
    "PairRefused",
    "RdmaBackend",
    "Transfer",
]

log = logging.getLogger("monarch.rdma.server")


@dataclass(frozen=True, slots=True)
class Transfer:
    """One transfer: a range of a remote region and the local memory it moves
    to or from; what :meth:`RdmaBackend.transfer` is given."""

    handle: Handle
    """The remote region."""
    local: LocalMemory
    """The local memory; its first ``nbytes`` bytes are read (for a write)
    or filled (for a read)."""
    remote_offset: int
    """Where in the region the range starts."""
    nbytes: int
    """How many bytes to move."""
    write: bool
    """True to copy ``local`` into the region, False to read the region into ``local``."""
    deadline: float
    """A ``time.monotonic()`` value; the transfer must fail, not long after
    it has passed, if it has not finished."""


@runtime_checkable
class RdmaBackend(Protocol):
    """One way of moving bytes between local memory and a registered region."""

    name: str
    """The backend's name, as settings and ``RDMABuffer.backend`` spell it
    (``"tcp"`` ...)."""

    def available(self) -> bool:
        """Whether this process can use the backend at all."""
        ...

    def unsupported(self, handle: Handle, local: LocalMemory) -> str | None:
        """Why this backend cannot move bytes between ``local`` and ``handle``.

        Args:
            handle: the remote region, as its pickled ``RDMABuffer`` describes
                it (owner, address, length, device, what the owner advertised).
            local: the local memory of the transfer.

        Returns:
            The reason in words, or None when the backend can serve the pair.
        """
        ...

    def transfer(self, t: Transfer) -> None:
        """Move ``t.nbytes`` bytes between the remote region and the start of ``t.local``.

        Args:
            t: what to move, where, and by when.

        Raises:
            RDMAError: the transfer failed (a subclass says why).
            PairRefused: the pair turns out to be unreachable after all and
                nothing has moved; the transfer then goes to the next backend.
        """
        ...


class PairRefused(Exception):
    """Raised by ``transfer`` when the system refuses this backend for this
    pair and nothing moved; the transfer goes to the next backend.
    ``unsupported`` should say so from then on, so that later transfers do
    not try it first again."""


class ConnectionResources:
    """What a peer made the owner create or hold through one data-plane
    connection (an ibverbs queue pair, a cma lease): bounded per kind, and
    released when that connection closes, so a peer cannot make the owner
    hoard resources beyond its connections' lifetime."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[str, dict[int, Callable[[], None]]] = {}
        self._keys = itertools.count(1)
        self._closed = False
        self.poll_next = 0.0
        """Seconds the server polls for this connection's next request, set
        by an operation whose peer is likely to send another at once (a
        CUDA copy): a sleeping thread takes tens of microseconds to wake.
        Reset to 0 once polled."""

    def count(self, kind: str) -> int:
        """How many of ``kind`` this connection holds."""
        with self._lock:
            return len(self._held.get(kind, ()))

    def reserve(self, kind: str, limit: int) -> None:
        """``RequestError`` if this connection already holds ``limit`` of ``kind``."""
        if self.count(kind) >= limit:
            raise RequestError(
                Status.BAD_REQUEST,
                f"this connection already holds {limit} {kind} (the most one connection may "
                "hold); close it, or use another connection",
            )

    def hold(self, kind: str, release: Callable[[], None]) -> int:
        """Keep ``release`` to run when the connection closes (at once if it
        already has); returns a key for :meth:`release`."""
        with self._lock:
            key = next(self._keys)
            if not self._closed:
                self._held.setdefault(kind, {})[key] = release
                return key
        release()
        return key

    def release(self, kind: str, key: int) -> bool:
        """Run and forget one held ``release`` now; False if none has that key."""
        with self._lock:
            release = self._held.get(kind, {}).pop(key, None)
        if release is None:
            return False
        release()
        return True

    def close(self) -> None:
        """Release everything held (the connection closed); never raises."""
        with self._lock:
            self._closed = True
            held, self._held = self._held, {}
        for kind, releases in held.items():
            for release in releases.values():
                try:
                    release()
                except Exception:  # one failed release must not leak the others
                    log.exception("releasing a %s of a closed RDMA connection failed", kind)


@dataclass(frozen=True)
class OwnerRequest:
    """One request to an owner's data-plane server, for a backend's operation."""

    op: int
    buffer_id: int
    offset: int
    length: int
    args: dict[str, Any]
    region: Region | None  # None: not registered (dropped, or a stale token)
    resources: ConnectionResources = field(default_factory=ConnectionResources)
    """What the peer's connection holds; released when it closes."""
    payload: Payload | None = None
    """The data that follows the request (a write's), when its flags say so."""
    peer_pid: int | None = None
    """The pid of the process at the other end, as the kernel says
    (``SO_PEERCRED``): on the owner's Unix socket only, None on TCP."""

    def registered(self) -> Region:
        """The region, or the ``DROPPED`` answer the server sends for it."""
        if self.region is None:
            raise RequestError(Status.DROPPED, dropped_message(self.buffer_id))
        return self.region


OwnerOp = Callable[[Channel, OwnerRequest], None]
"""A backend's operation on the owner: it uses the request's data (its
``payload``, a write's) and sends one answer on the connection (see
``_wire``); ``RequestError`` becomes an error answer. The request has
passed its integrity check when the connection is sealed."""
