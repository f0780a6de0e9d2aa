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
memory the *peer* shares (operation ``CUDA_COPY``). For a CUDA tensor of
the peer that is the tensor itself: the peer lends its storage (torch's
CUDA IPC sharing, which keeps the peer's memory from being reused while the
owner has it open) and the owner copies straight between it and the
registered range, one device copy per transfer. For host memory of the
peer, the peer stages through a device allocation of its own. What the peer
lends is its own memory, to a process of the job on its host that the
owner's Unix socket authenticates: the owner's side of the data plane
already reads a cma writer's whole address space.

Per transfer the owner still checks everything, as before: the region is
registered (not dropped), the range lies inside it, a write is refused on a
read-only buffer, and the copy runs under a use of the region, which ends
only once the copy has completed (an event of the owner's own, on the
copy's stream): once ``drop()`` returns, no copy of it runs. The owner
answers as soon as the copy is queued, naming an *interprocess* event
recorded after it; the peer waits on that event, so the answer travels
while the device copies. The owner's own wait uses a second, private
event: an event the peer can open it can also record, and that must never
shorten the owner's wait. Events and streams live in *lanes*, one per
connection and device while the connection lasts, then kept for the next
connection (never destroyed: a peer may still hold a lane's event open).
What is cached is
only the *peer's* side: the owner keeps the peer's opened storages per
connection (at most :data:`OPENED_PER_CONNECTION`, least recently used
first out, all closed when the connection closes, and each one as soon as
the peer says its storage is gone), and the peer keeps the description of
each storage it shared while that storage lives, so a repeated transfer
costs one round trip on the owner's Unix socket and one device copy.
Everything here needs torch with CUDA; without it the errors say so.
"""

from __future__ import annotations

import collections
import json
import logging
import sys
import threading
import weakref
from collections.abc import Callable, Hashable
from typing import Any

import monarch_rdma._backends as _backends
import monarch_rdma._control as _control

from ._backend import ConnectionResources, OwnerRequest, Transfer
from ._cuda_memory import bytes_of, cuda_available, torch_module
from ._errors import RDMATransferError
from ._handle import Handle
from ._identity import this_host
from ._memory import LocalMemory
from ._wire import Channel, RequestError, Status, answer, readonly_message

__all__ = [
    "CUDA_COPY",
    "CudaIpcBackend",
    "ExportCache",
    "Lane",
    "OpenedCache",
    "export_key",
    "open_shared",
    "share",
]

log = logging.getLogger("monarch.rdma.server")

CUDA_COPY = 8
"""args {"handle": the peer's shared storage, "at": where its range starts in
that storage, "write": bool, "forget": keys of storages the peer let go}:
the owner copies the range between its region and the peer's storage, and
answers once the copy is queued: the answer's text names (in hex) the
interprocess event recorded after the copy, which the peer waits on."""
IDLE_STAGING = 4  # staging allocations a peer keeps per device for reuse (host memory only)
OPENED_PER_CONNECTION = 8  # peer storages an owner keeps open per connection
MAX_FORGET = 64  # keys one request may ask the owner to forget
OPENED_EVENTS = 64  # owners' interprocess events a peer keeps open (one per owner connection)
IPC_HANDLE_BYTES = 64  # cudaIpcEventHandle_t
# seconds the owner polls for a connection's next request after a copy: a
# peer moving a tensor in pieces, or in a loop, asks again within
# microseconds, and a sleeping server thread takes tens of them to wake
POLL_AFTER_COPY = 0.0002


def share(storage: Any) -> list[Any]:
    """The CUDA IPC description of a CUDA ``storage``, as JSON can carry it."""
    shared = storage._share_cuda_()
    return [item.hex() if isinstance(item, bytes) else item for item in shared]


def export_key(items: list[Any]) -> str:
    """The name both sides give one shared storage (its whole description:
    the IPC handle, the offset, and torch's reference counter slot, which is
    new for every share)."""
    return "|".join(str(item) for item in items)


def open_shared(items: list[Any]) -> Any:
    """A flat uint8 tensor over the storage another process shared with :func:`share`."""
    torch = torch_module()
    args = [bytes.fromhex(item) if isinstance(item, str) else item for item in items]
    storage = torch.UntypedStorage._new_shared_cuda(*args)
    flat = torch.empty(0, dtype=torch.uint8, device=storage.device)
    flat.set_(storage, 0, (storage.nbytes(),), (1,))
    return flat


class OpenedCache:
    """What one connection's peer had the owner open (its shared storages),
    by :func:`export_key`: at most ``limit``, the least recently used closed
    first. Closing one is dropping the owner's reference (torch then closes
    the IPC mapping and tells the peer's allocator it may reuse the memory)."""

    def __init__(self, limit: int = OPENED_PER_CONNECTION) -> None:
        self._limit = limit
        self._lock = threading.Lock()
        self._opened: collections.OrderedDict[str, Any] = collections.OrderedDict()

    def get(self, key: str, open_it: Callable[[], Any]) -> Any:
        """The object opened for ``key``, opening it (``open_it()``) the first time."""
        with self._lock:
            found = self._opened.get(key)
            if found is not None:
                self._opened.move_to_end(key)
                return found
        opened = open_it()  # outside the lock: opening maps memory (milliseconds)
        with self._lock:
            self._opened[key] = opened
            self._opened.move_to_end(key)
            while len(self._opened) > self._limit:
                self._opened.popitem(last=False)
        return opened

    def forget(self, keys: list[str]) -> None:
        """Close what was opened for ``keys`` (those not open are ignored)."""
        with self._lock:
            for key in keys:
                self._opened.pop(key, None)

    def clear(self) -> None:
        """Close everything (the connection closed)."""
        with self._lock:
            self._opened.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._opened)


class ExportCache:
    """The peer's side: the description of each storage it shared, while the
    storage lives, and which owners were sent it, so that each is told (in
    its next request) to close its mapping once the storage is gone.

    ``ref(storage)`` makes a weak reference with ``expired()`` and a
    ``cdata`` identity (torch's ``StorageWeakRef``: while it exists, no other
    storage gets that identity); ``describe(storage)`` shares it."""

    def __init__(self, ref: Callable[[Any], Any], describe: Callable[[Any], list[Any]]) -> None:
        self._ref = ref
        self._describe = describe
        self._lock = threading.Lock()
        self._live: dict[int, tuple[Any, list[Any], set[Hashable]]] = {}
        self._pending: dict[Hashable, list[str]] = {}  # owner -> keys to forget

    def items_for(self, storage: Any, owner: Hashable) -> list[Any]:
        """The shared description of ``storage``, sent to ``owner``."""
        ref = self._ref(storage)
        with self._lock:
            self._prune()
            entry = self._live.get(ref.cdata)
            if entry is None:
                items = self._describe(storage)
                entry = (ref, items, set())
                self._live[ref.cdata] = entry
            entry[2].add(owner)
            return entry[1]

    def take_forgotten(self, owner: Hashable) -> list[str]:
        """Keys of storages gone since ``owner`` was last told (at most
        :data:`MAX_FORGET`; the rest wait for the next request)."""
        with self._lock:
            self._prune()
            keys = self._pending.get(owner, [])
            told, rest = keys[:MAX_FORGET], keys[MAX_FORGET:]
            if rest:
                self._pending[owner] = rest
            else:
                self._pending.pop(owner, None)
            return told

    def _prune(self) -> None:
        for cdata, (ref, items, owners) in list(self._live.items()):
            if ref.expired():
                del self._live[cdata]
                key = export_key(items)
                for owner in owners:
                    self._pending.setdefault(owner, []).append(key)

    def __len__(self) -> int:
        with self._lock:
            return len(self._live)


class Lane:
    """One connection's copies on one device: the owner's stream for them, a
    private event the owner waits on, and an interprocess event the peer
    waits on (``told``, its IPC handle in hex as ``told_name``)."""

    def __init__(self, torch: Any, device: Any) -> None:
        with torch.cuda.device(device):
            self.stream = torch.cuda.Stream(device=device)
            self.done = torch.cuda.Event()
            self.told = torch.cuda.Event(interprocess=True)
            self.told_name = bytes(self.told.ipc_handle()).hex()


class _Connection:
    """What one connection's peer had us open, and its lanes by device."""

    def __init__(self) -> None:
        self.opened = OpenedCache()
        self.lanes: dict[int, Lane] = {}


# connection -> its state; closed with the connection (lanes go back to _idle_lanes)
_connections: weakref.WeakKeyDictionary[ConnectionResources, _Connection] = (
    weakref.WeakKeyDictionary()
)
_connections_lock = threading.Lock()
_idle_lanes: dict[int, list[Lane]] = {}  # device index -> lanes no connection uses now


def _connection(resources: ConnectionResources) -> _Connection:
    with _connections_lock:
        state = _connections.get(resources)
        if state is None:
            state = _connections[resources] = _Connection()

            def close() -> None:
                state.opened.clear()
                with _connections_lock:
                    for index, lane in state.lanes.items():
                        _idle_lanes.setdefault(index, []).append(lane)
                    state.lanes.clear()

            resources.hold("cuda_ipc mappings", close)
        return state


def _opened_for(resources: ConnectionResources) -> OpenedCache:
    return _connection(resources).opened


def _lane(torch: Any, state: _Connection, device: Any) -> Lane:
    """The connection's lane on ``device``; the first time, taken from the
    idle ones (or made), and made the serving thread's current stream on
    that device: every copy of the connection runs on it, and waits for
    nothing else the owner runs."""
    lane = state.lanes.get(device.index)
    if lane is None:
        with _connections_lock:
            idle = _idle_lanes.get(device.index)
            lane = idle.pop() if idle else None
        if lane is None:
            lane = Lane(torch, device)
        state.lanes[device.index] = lane
        # one thread serves a connection for its whole life: set once, not per copy
        torch.cuda.set_stream(lane.stream)
    return lane


def _serve_copy(chan: Channel, request: OwnerRequest) -> None:
    """Owner side of ``CUDA_COPY``: copy the range between the region and
    the peer's shared memory, under a use of the region."""
    write = request.args.get("write")
    items = request.args.get("handle")
    at = request.args.get("at", 0)
    forget = request.args.get("forget", [])
    if (
        not isinstance(write, bool)
        or not isinstance(items, list)
        or not isinstance(at, int)
        or isinstance(at, bool)
        or at < 0
        or not isinstance(forget, list)
        or len(forget) > MAX_FORGET
        or not all(isinstance(key, str) for key in forget)
    ):
        raise RequestError(Status.BAD_REQUEST, "CUDA_COPY needs a shared handle and a direction")
    opened = _opened_for(request.resources)
    opened.forget(forget)  # first: the peer's storages are gone even if this copy is refused
    region = request.registered()  # every transfer: not dropped
    memory = region.memory
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
    mine = bytes_of(memory)[offset : offset + length]
    state = _connection(request.resources)
    lane = _lane(torch, state, mine.device)
    # opened on the lane's stream: torch makes it wait for the peer's sharing event
    try:
        theirs = state.opened.get(export_key(items), lambda: open_shared(items))
    except Exception as error:  # a malformed or stale handle: the peer's, not ours
        raise RequestError(
            Status.BAD_REQUEST, f"cannot open the peer's shared CUDA memory: {error}"
        ) from None
    if at + length > theirs.numel():
        raise RequestError(
            Status.BAD_REQUEST, "the peer's shared CUDA memory is smaller than the range"
        )
    with region.touching():  # drop() waits for the copy, completed, to end
        if write:
            mine.copy_(theirs[at : at + length], non_blocking=True)
        else:
            theirs[at : at + length].copy_(mine, non_blocking=True)
        lane.told.record(lane.stream)
        lane.done.record(lane.stream)
        answer(chan, Status.OK, lane.told_name)  # travels while the device copies
        try:
            lane.done.synchronize()  # this copy only: not the device, not the owner's other work
        except Exception as error:
            # answered already: a second answer would break the stream; close it instead
            log.error("a cuda_ipc copy failed after it was queued: %s", error)
            raise ConnectionAbortedError(f"the device copy failed: {error}") from error
    request.resources.poll_next = POLL_AFTER_COPY


def _storage_ref(storage: Any) -> Any:
    """torch's weak reference to ``storage`` (``expired()``, ``cdata``)."""
    # importing torch imports torch.multiprocessing and its reductions
    return torch_module().multiprocessing.reductions.StorageWeakRef(storage)


class CudaIpcBackend:
    """Device copies the owner makes between its memory and the peer's."""

    name = "cuda_ipc"

    def __init__(self) -> None:
        self._idle: dict[str, list[Any]] = {}  # device -> staging tensors not in use
        self._lock = threading.Lock()
        self.exports = ExportCache(_storage_ref, share)
        # (owner pid, owner address, event name) -> the owner's interprocess event, opened here
        self._told: collections.OrderedDict[tuple[Any, ...], Any] = collections.OrderedDict()

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

    def _copy(self, t: Transfer, shared: Any) -> None:
        """One ``CUDA_COPY`` between the region and ``shared`` (a flat uint8
        CUDA tensor of ours, standing for ``t.local``); the owner answers once
        the copy has completed."""
        handle = t.handle
        torch = torch_module()
        storage = shared.untyped_storage()
        at = int(shared.data_ptr()) - int(storage.data_ptr())
        owner = handle.owner.local or handle.owner.server
        args = {
            "handle": self.exports.items_for(storage, owner),
            "at": at,
            "write": t.write,
            "forget": self.exports.take_forgotten(owner),
        }
        # The owner's copy runs on its own stream: our work on this memory
        # (a kernel producing a write's source, or still reading a read's
        # destination) must have finished. Only this stream, not the device.
        torch.cuda.current_stream(shared.device.index).synchronize()
        arg_bytes = json.dumps(args).encode()
        with _control.connection(handle, t.deadline, local=bool(handle.owner.local)) as chan:
            _, told = _control.exchange_raw(
                chan, handle, CUDA_COPY, t.deadline, arg_bytes, t.remote_offset, t.nbytes
            )
        # answered once queued: the copy has completed when the event it names has
        self._told_event(torch, handle, told, shared.device).synchronize()

    def _told_event(self, torch: Any, handle: Handle, told: bytes, device: Any) -> Any:
        """The owner's interprocess event named ``told`` (hex of its IPC
        handle), opened once per owner process and name."""
        key = (handle.owner.pid, handle.owner.local or handle.owner.server, told)
        with self._lock:
            event = self._told.get(key)
            if event is not None:
                self._told.move_to_end(key)
                return event
        try:
            name = bytes.fromhex(told.decode("ascii"))
            if len(name) != IPC_HANDLE_BYTES:
                raise ValueError(f"{len(name)} bytes, not {IPC_HANDLE_BYTES}")
            event = torch.cuda.Event.from_ipc_handle(device, name)
        except (ValueError, UnicodeDecodeError, RuntimeError) as error:
            raise RDMATransferError(
                f"the owner of RDMA buffer {handle.buffer_id} (pid {handle.owner.pid} on "
                f"{handle.owner.hostname}) answered a CUDA copy with an event that cannot be "
                f"opened ({error}); whether the copy completed is unknown"
            ) from None
        with self._lock:
            self._told[key] = event
            while len(self._told) > OPENED_EVENTS:
                self._told.popitem(last=False)
        return event

    def transfer(self, t: Transfer) -> None:
        local, nbytes, write = t.local, t.nbytes, t.write
        torch = torch_module()
        mine: Any = None  # the local bytes, as a tensor (None: nothing to move)
        if local.is_cuda and nbytes:
            flat = bytes_of(local)
            start = local.addr - int(flat.data_ptr())  # a piece of the tensor starts further on
            mine = flat[start : start + nbytes]
            try:
                # straight between the owner's memory and ours: one device copy
                self._copy(t, mine)
                return
            except RuntimeError as error:
                # torch will not share a storage it received from another
                # process (nothing moved): stage it; anything else is a failure
                if "received from another process" not in str(error):
                    raise
        elif nbytes:
            mine = torch.frombuffer(local.view(0, nbytes), dtype=torch.uint8)
        device = local.device if local.is_cuda else t.handle.device
        staging = self._take(device, nbytes)
        try:
            if write and mine is not None:
                staging[:nbytes].copy_(mine)
            self._copy(t, staging[:nbytes])
            if not write and mine is not None:
                mine.copy_(staging[:nbytes])
                torch.cuda.current_stream(staging.device.index).synchronize()
        finally:
            self._give(device, staging)


_backends.register(
    _backends.Registration(
        CudaIpcBackend(),
        rank=10,
        owner_ops={CUDA_COPY: _serve_copy},
        copies_in_caller=True,
        in_pieces=False,
    )
)
