"""The ``cma`` backend: same host, ``process_vm_readv`` (Linux cross-memory
attach), with the owner in charge of its memory.

**Reads** are one-sided: the reader copies straight from the owner's memory
with ``process_vm_readv``, the owner's threads not involved in the copy. The
owner only grants, over its Unix socket, a *lease* of the range first
(``CMA_LEASE``, one round trip), which the reader releases when done
(``CMA_RELEASE``, sent without waiting for an answer); ``drop()`` waits for
every lease (bounded in time, and released with the reader's connection at
the latest), so a read never runs on memory its owner let go of, where the
owner can prevent it.

**Writes** go through the owner: the writer asks it (``CMA_WRITE``, over the
owner's Unix socket, with the address of its source), and the owner copies
the bytes in with ``process_vm_readv`` *from the writer*: the process the
kernel says is at the other end of the connection (``SO_PEERCRED``), never
one a request names. So the owner checks what is writable (a read-only
buffer is refused, whatever a handle claims) and the bounds, and copies in
pieces, each holding a use of the region: ``drop()`` waits for the piece in
progress and refuses the rest, so nothing lands after it returns, and the
writer learns of it (``RDMABufferDropped``). Our library never calls
``process_vm_writev`` into an owner. (A process of the same user that does
so itself is not stopped by this: the kernel allows it whatever we do,
unless Yama restricts ptrace; see docs/concepts/rdma.md.)

A large copy is split into pieces copied by several threads at once
(``cma_threads``, one per core by default): one thread's system call is
bound by the per-page work of one core, not by memory bandwidth.

The kernel allows cross-memory attach when the copying process may ptrace
the other: same user (or CAP_SYS_PTRACE), and under Yama's ``ptrace_scope``
1 only if the other named it. So there, before its first read from an
owner, a reader asks the owner to let it attach (``ALLOW_ATTACH``, on the
Unix socket: the owner names the asking process, see ``_ptrace``), and
before its first write to an owner, a writer lets that owner attach to it
(its own tracer policy). Where the kernel still refuses (``EPERM``: scope 2
or 3, a seccomp filter, another user, a tracer that would cover too much),
the pair falls back to the next backend (tcp) with a warning, once.

Owner side: the kernel pins each page of the owner's memory it copies, and
pinning a 2 MiB huge page costs what pinning one 4 KiB page does; a reader
copies huge-page memory about 1.5 times as fast. So an owner asks for huge
pages for the 2 MiB-aligned part of each large registered region
(``madvise``: ``MADV_HUGEPAGE`` for pages still to come, ``MADV_COLLAPSE``
for those already there), in a background thread: registration does not
wait, and the contents never change (``huge_pages=False`` turns it off).
"""

from __future__ import annotations

import ctypes
import errno
import os
import queue
import threading
import time
import warnings
from collections.abc import Callable

import monarch_rdma._backends as _backends
import monarch_rdma._control as _control
import monarch_rdma._owner as _owner
import monarch_rdma._parallel as _parallel
import monarch_rdma._ptrace as _ptrace
from monarch_actor.extension import background_thread

from ._backend import OwnerRequest, PairRefused, Transfer
from ._config import get_config
from ._errors import (
    RDMABufferDropped,
    RDMAOwnerGone,
    RDMATcpFallbackWarning,
    RDMATimeoutError,
    RDMATransferError,
)
from ._handle import Handle
from ._identity import this_host
from ._memory import LocalMemory
from ._ptrace import ptrace_scope
from ._regions import LEASE_MAX, Region, writable_token
from ._server import check_bounds
from ._wire import Channel, RequestError, Status, answer, answer_json, readonly_message

__all__ = [
    "ALLOW_ATTACH",
    "CMA_LEASE",
    "CMA_RELEASE",
    "CMA_WRITE",
    "CmaBackend",
    "CmaDenied",
    "copy",
    "permitted",
    "ptrace_scope",
    "supported",
]

ALLOW_ATTACH = 9  # data-plane operation: the owner lets the asking process (SO_PEERCRED) attach
CMA_WRITE = 10  # args {"addr": source in the writer}: the owner copies length bytes in from it
CMA_LEASE = 11  # args {"seconds": most}: a lease of [offset, offset + length); value: its id
CMA_RELEASE = 12  # args {"lease": id}: the read is done (sent QUIET: no answer)
MAX_LEASES_PER_CONNECTION = 64
LEASE_SLACK = 1.0  # seconds a reader asks for beyond its own deadline
OWNER_PIECE = 8 << 20  # the most the owner copies under one use: what drop() may wait for
PIECE = 256 << 20  # one system call moves at most this much; the deadline is checked between
PARALLEL_FROM = 8 << 20  # smaller transfers run on one thread: a hand-off would cost more
PARALLEL_PIECE = 2 << 20  # the smallest piece a thread takes (pieces shrink to it at the end)


class _IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


_libc = ctypes.CDLL(None, use_errno=True)
_readv = getattr(_libc, "process_vm_readv", None)
_writev = getattr(_libc, "process_vm_writev", None)
for _fn in (_readv, _writev):
    if _fn is not None:
        _fn.argtypes = [
            ctypes.c_int,
            ctypes.POINTER(_IoVec),
            ctypes.c_ulong,
            ctypes.POINTER(_IoVec),
            ctypes.c_ulong,
            ctypes.c_ulong,
        ]
        _fn.restype = ctypes.c_ssize_t
_madvise = getattr(_libc, "madvise", None)
if _madvise is not None:
    _madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    _madvise.restype = ctypes.c_int
MADV_HUGEPAGE = 14
MADV_COLLAPSE = 25  # Linux 6.1+; older kernels answer EINVAL, and nothing changes
HUGE_PAGE = 2 << 20
HUGE_PAGES_FROM = 8 << 20  # smaller regions: too few huge pages to be worth a system call
COLLAPSE_STEP = 32 << 20  # one MADV_COLLAPSE call; the region is looked up again between


class CmaDenied(PairRefused):
    """The kernel refused cross-memory attach to this owner (``EPERM``)."""


def supported() -> bool:
    """Whether this C library has ``process_vm_readv`` and ``process_vm_writev``."""
    return _readv is not None and _writev is not None


def permitted() -> bool:
    """Whether same-user readers may attach to this process at all: False
    where the system forbids it for certain (no syscall, Yama scope 2 or 3).
    Nothing is granted here: under scope 1 each reader asks (``ALLOW_ATTACH``)."""
    if not supported():
        return False
    scope = ptrace_scope()
    if scope is not None and scope >= 2:
        return os.geteuid() == 0 and scope == 2  # scope 2: CAP_SYS_PTRACE only
    return True


def copy(pid: int, local_addr: int, remote_addr: int, nbytes: int, write: bool) -> int:
    """One system call; returns the bytes moved, raises ``OSError`` on failure."""
    fn = _writev if write else _readv
    assert fn is not None
    local = _IoVec(local_addr, nbytes)
    remote = _IoVec(remote_addr, nbytes)
    done = int(fn(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0))
    if done < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return done


def _copy_all(
    handle: Handle, local_addr: int, remote_addr: int, nbytes: int, write: bool, deadline: float
) -> None:
    pid = handle.owner.pid
    moved = 0
    while moved < nbytes:
        if time.monotonic() > deadline:
            raise RDMATimeoutError(f"RDMA transfer with buffer {handle.buffer_id} timed out")
        size = min(PIECE, nbytes - moved)
        try:
            done = copy(pid, local_addr + moved, remote_addr + moved, size, write)
        except OSError as error:
            raise _mapped(handle, error) from error
        if done == 0:
            raise RDMATransferError(
                f"process_vm_{'writev' if write else 'readv'} moved no bytes of buffer "
                f"{handle.buffer_id} at offset {moved}: the owner's memory is no longer mapped "
                "(was it freed before drop()?)"
            )
        moved += done


def _mapped(handle: Handle, error: OSError) -> Exception:
    owner = handle.owner
    if error.errno == errno.ESRCH:
        return RDMAOwnerGone(
            f"the owner of RDMA buffer {handle.buffer_id} (pid {owner.pid} on "
            f"{owner.hostname}) has exited; the buffer is gone with it"
        )
    if error.errno == errno.EPERM:
        return CmaDenied(str(error))
    if error.errno == errno.EFAULT:
        return RDMATransferError(
            f"buffer {handle.buffer_id}: an address is not mapped in the owner or in this "
            "process (was the memory freed while registered?)"
        )
    return RDMATransferError(f"cross-memory attach to pid {owner.pid} failed: {error}")


def _dropped(handle: Handle) -> RDMABufferDropped:
    return RDMABufferDropped(
        f"buffer {handle.buffer_id} is not registered at its owner (pid {handle.owner.pid}): "
        "it was dropped (RDMABuffer.drop())"
    )


def _dropped_during_write(handle: Handle) -> RDMABufferDropped:
    return RDMABufferDropped(
        f"buffer {handle.buffer_id} was dropped (RDMABuffer.drop()) by its owner (pid "
        f"{handle.owner.pid}) while this write was in progress: the write may not have reached it"
    )


def check_token(handle: Handle, write: bool = False) -> None:
    """The owner still registers the buffer (one 8-byte read of its slot):
    the transfer's one control step. For a write, the token must also say
    the owner registered writable memory: the owner's slot decides, not
    the handle's ``readonly`` flag."""
    cell = ctypes.c_uint64(0)
    _copy_all(handle, ctypes.addressof(cell), handle.slot_addr, 8, False, float("inf"))
    if cell.value != handle.token:
        raise _dropped(handle)
    if write and not writable_token(cell.value):
        raise RDMATransferError(readonly_message(handle.buffer_id))


def _in_pieces(nbytes: int, move: Callable[[int, int], None]) -> None:
    """``move(offset, length)`` over ``[0, nbytes)``, on several threads when large."""
    if nbytes < PARALLEL_FROM:  # the common small transfer: one call, no planning
        move(0, nbytes)
        return
    _parallel.copy_in_pieces(nbytes, move, get_config().copy_threads, PARALLEL_PIECE)


class CmaBackend:
    """Same-host transfers by cross-memory attach (an in-process buffer: memmove)."""

    name = "cma"

    def __init__(self) -> None:
        self.denied: set[tuple[str, int]] = set()
        self.allowed: set[tuple[str, int, int]] = set()  # owners that let us attach
        self.lock = threading.Lock()

    def available(self) -> bool:
        return supported()

    def unsupported(self, handle: Handle, local: LocalMemory) -> str | None:
        owner = handle.owner
        if not self.available():
            return "this C library has no process_vm_readv"
        if owner.host_key != this_host():
            return "the owner is on another host (or in another pid namespace)"
        if handle.is_cuda or local.is_cuda:
            return "cross-memory attach moves host memory only, not CUDA memory"
        if not owner.feature("cma"):
            return "the owner's system forbids cross-memory attach (Yama ptrace_scope)"
        if (owner.host_key, owner.pid) in self.denied:
            return f"the kernel refused cross-memory attach with pid {owner.pid} (EPERM)"
        if owner.pid != os.getpid() and not (owner.local and os.path.exists(owner.local)):
            return (
                "the owner's Unix socket cannot be reached from here (another mount namespace, "
                "or an owner without one): it grants and copies same-host transfers"
            )
        return None

    def transfer(self, t: Transfer) -> None:
        handle = t.handle
        if handle.owner.pid == os.getpid():
            self._in_process(handle, t.local.addr, handle.addr + t.remote_offset, t.nbytes, t.write)
            return
        try:
            if t.write:
                self._write(t)
            else:
                self._allowed(handle, t.deadline)
                self._read(t)
        except PairRefused as error:
            owner = handle.owner
            with self.lock:
                self.denied.add((owner.host_key, owner.pid))
            warnings.warn(
                f"cross-memory attach with pid {owner.pid} is not permitted here (ptrace_scope="
                f"{ptrace_scope()}: {error}); falling back to the tcp backend for this owner",
                RDMATcpFallbackWarning,
                stacklevel=2,
            )
            raise CmaDenied(str(error)) from error

    @staticmethod
    def _read(t: Transfer) -> None:
        """A lease of the range from the owner, the copy, the lease's release."""
        handle, deadline = t.handle, t.deadline
        local, remote = t.local.addr, handle.addr + t.remote_offset

        def move(offset: int, length: int) -> None:
            _copy_all(handle, local + offset, remote + offset, length, False, deadline)

        seconds = max(0.0, deadline - time.monotonic()) + LEASE_SLACK
        with _control.connection(handle, deadline, local=True) as chan:
            asked = time.monotonic()
            lease, _ = _control.exchange(chan, handle, CMA_LEASE, deadline, {"seconds": seconds},
                                         t.remote_offset, t.nbytes)  # fmt: skip
            try:
                _in_pieces(t.nbytes, move)
            finally:
                _control.tell(chan, handle, CMA_RELEASE, {"lease": lease})
        if time.monotonic() > asked + min(seconds, LEASE_MAX):  # the lease may have run out
            check_token(handle)  # dropped meanwhile: the bytes may be stale

    def _write(self, t: Transfer) -> None:
        """Ask the owner to copy ``t.local`` in: it reads it from this process."""
        self._let_owner_attach(t.handle)
        _control.request(t.handle, CMA_WRITE, t.deadline, {"addr": t.local.addr},
                         t.remote_offset, t.nbytes, local=True)  # fmt: skip

    def _let_owner_attach(self, handle: Handle) -> None:
        """Under Yama scope 1, let the owner attach to this process (once per
        owner), so that it can copy a write's source in."""
        owner = handle.owner
        key = (owner.host_key, -owner.pid, owner.start_time)  # apart from the readers' keys
        if key in self.allowed:
            return
        if ptrace_scope() == 1:
            try:
                _ptrace.policy.allow(owner.pid)
            except PermissionError as error:
                raise CmaDenied(str(error)) from error
        with self.lock:
            self.allowed.add(key)

    def _allowed(self, handle: Handle, deadline: float) -> None:
        """Under Yama scope 1, ask the owner once to let this process attach
        (the owner names as few tracers as it can); a refusal is ``CmaDenied``."""
        owner = handle.owner
        key = (owner.host_key, owner.pid, owner.start_time)
        if key in self.allowed:
            return
        if ptrace_scope() == 1:  # the host's setting: read once per owner, not per transfer
            try:  # the owner names the process at our end of its Unix socket: this one
                _control.request(handle, ALLOW_ATTACH, deadline, local=True)
            except (RDMABufferDropped, RDMAOwnerGone, RDMATimeoutError):
                raise
            except RDMATransferError as error:  # the owner refused: tcp serves this pair
                raise CmaDenied(str(error)) from error
        with self.lock:
            self.allowed.add(key)

    @staticmethod
    def _in_process(handle: Handle, local: int, remote: int, nbytes: int, write: bool) -> None:
        """The owner is this process: memmove, after the same checks, each
        piece holding a use of the region (``drop()`` waits for it)."""
        region = _owner.regions().lookup(handle.buffer_id, handle.token)
        if region is None:
            raise _dropped(handle)
        if write and region.memory.readonly:
            raise RDMATransferError(readonly_message(handle.buffer_id))
        src, dst = (local, remote) if write else (remote, local)

        def move(offset: int, length: int) -> None:
            for start in range(offset, offset + length, OWNER_PIECE):
                size = min(OWNER_PIECE, offset + length - start)
                with region.touching():
                    ctypes.memmove(dst + start, src + start, size)

        try:
            _in_pieces(nbytes, move)
        except RDMABufferDropped as error:
            raise (_dropped_during_write(handle) if write else _dropped(handle)) from error
        if write and _owner.regions().lookup(handle.buffer_id, handle.token) is None:
            raise _dropped_during_write(handle)


# -- the owner's side ---------------------------------------------------------------------


def huge_page_range(addr: int, nbytes: int) -> tuple[int, int] | None:
    """The 2 MiB-aligned part of ``[addr, addr + nbytes)``, if it is worth huge pages."""
    if nbytes < HUGE_PAGES_FROM:
        return None
    start = -(-addr // HUGE_PAGE) * HUGE_PAGE
    end = (addr + nbytes) // HUGE_PAGE * HUGE_PAGE
    return (start, end) if end > start else None


class _Collapser:
    """One daemon thread that collapses registered regions into huge pages,
    a step at a time, and stops at a region that was dropped meanwhile."""

    def __init__(self) -> None:
        self.work: queue.SimpleQueue[tuple[Region, int, int]] = queue.SimpleQueue()
        self.thread = background_thread("monarch-rdma-hugepages", self._run)
        self.thread.start()

    def _run(self) -> None:
        while True:
            region, start, end = self.work.get()
            for step in range(start, end, COLLAPSE_STEP):
                if _owner.regions().lookup(region.buffer_id, region.token) is not region:
                    break  # dropped: its memory is no longer ours to touch
                assert _madvise is not None
                _madvise(step, min(COLLAPSE_STEP, end - step), MADV_COLLAPSE)


_collapser: _Collapser | None = None
_collapser_lock = threading.Lock()


def prefer_huge_pages(region: Region) -> None:
    """Owner-side hook: ask for huge pages under a large host-memory region."""
    global _collapser
    memory = region.memory
    span = huge_page_range(memory.addr, memory.nbytes)
    if span is None or memory.is_cuda or _madvise is None or not get_config().huge_pages:
        return
    start, end = span
    _madvise(start, end - start, MADV_HUGEPAGE)  # failure only means 4 KiB pages, as before
    with _collapser_lock:
        if _collapser is None:
            _collapser = _Collapser()
        _collapser.work.put((region, start, end))


def _after_fork() -> None:
    global _collapser
    _collapser = None  # the parent's thread does not exist in a forked child


os.register_at_fork(after_in_child=_after_fork)


def _peer(request: OwnerRequest, what: str) -> int:
    """The asking process's pid, as the kernel says (the owner's Unix socket only)."""
    if request.peer_pid is None or request.peer_pid <= 0:
        raise RequestError(
            Status.BAD_REQUEST,
            f"{what} must come over the owner's Unix socket, where the kernel names the process "
            "that asks; over TCP the owner cannot know which process is at the other end",
        )
    return request.peer_pid


def _serve_allow(chan: Channel, request: OwnerRequest) -> None:
    """Owner side of ``ALLOW_ATTACH``: let the asking process attach to us.
    Only a holder of a live buffer of ours, over an authenticated connection
    to our Unix socket; the process allowed is the one the kernel says is at
    the other end (``SO_PEERCRED``), never one the request names."""
    request.registered()
    pid = _peer(request, "ALLOW_ATTACH")
    claimed = request.args.get("pid", pid)
    if claimed != pid:
        raise RequestError(
            Status.FAILED,
            f"ALLOW_ATTACH names process {claimed!r}, but the process asking is {pid}: a "
            "process may only ask for itself",
        )
    try:
        tracer = _ptrace.policy.allow(pid)
    except PermissionError as error:
        raise RequestError(Status.FAILED, str(error)) from error
    answer_json(chan, {"tracer": tracer})


def _serve_lease(chan: Channel, request: OwnerRequest) -> None:
    """Owner side of ``CMA_LEASE``: ``drop()`` waits for this reader's copy."""
    region = request.registered()
    check_bounds(region, request.offset, request.length)
    seconds = request.args.get("seconds", LEASE_MAX)
    if not isinstance(seconds, int | float) or isinstance(seconds, bool):
        raise RequestError(Status.BAD_REQUEST, f"a lease lasts some seconds, not {seconds!r}")
    request.resources.reserve(LEASES, MAX_LEASES_PER_CONNECTION)
    table = region.table
    if table is None:
        raise RequestError(Status.FAILED, "this region is not in a table of regions")
    lease = table.lease(region, float(seconds))
    key = request.resources.hold(LEASES, lambda: table.release(region, lease))
    answer(chan, Status.OK, value=key)


def _serve_release(chan: Channel, request: OwnerRequest) -> None:
    """Owner side of ``CMA_RELEASE``: the reader is done (the region may be
    dropped already: ``drop()`` is waiting for this)."""
    key = request.args.get("lease")
    if not isinstance(key, int) or not request.resources.release(LEASES, key):
        raise RequestError(Status.BAD_REQUEST, f"this connection holds no lease {key!r}")
    answer(chan, Status.OK)


def _serve_write(chan: Channel, request: OwnerRequest) -> None:
    """Owner side of ``CMA_WRITE``: copy the writer's source in, from the
    process at the other end of the connection, piece by piece, each under a
    use of the region: a ``drop()`` meanwhile stops it after that piece."""
    region = request.registered()
    if region.memory.readonly:
        raise RequestError(Status.READONLY, readonly_message(request.buffer_id))
    check_bounds(region, request.offset, request.length)
    pid = _peer(request, "a cma write")
    source = request.args.get("addr")
    if not isinstance(source, int) or isinstance(source, bool) or source <= 0:
        raise RequestError(Status.BAD_REQUEST, f"a cma write needs its source's address, not "
                           f"{source!r}")  # fmt: skip
    dst = region.memory.addr + request.offset

    def move(offset: int, length: int) -> None:
        for start in range(offset, offset + length, OWNER_PIECE):
            size = min(OWNER_PIECE, offset + length - start)
            with region.touching():  # RDMABufferDropped once drop() has begun
                _pull(pid, dst + start, source + start, size)

    try:
        _in_pieces(request.length, move)
    except RDMABufferDropped as error:
        raise RequestError(
            Status.DROPPED,
            f"buffer {request.buffer_id} was dropped (RDMABuffer.drop()) by its owner while this "
            "write was in progress: the owner stopped copying it in, and nothing of it lands "
            "after drop()",
        ) from error
    answer(chan, Status.OK)


def _pull(pid: int, local: int, remote: int, nbytes: int) -> None:
    """Copy ``nbytes`` from process ``pid`` at ``remote`` to ``local`` here."""
    moved = 0
    while moved < nbytes:
        try:
            done = copy(pid, local + moved, remote + moved, nbytes - moved, False)
        except OSError as error:
            if error.errno == errno.EPERM:
                raise RequestError(
                    Status.DENIED,
                    f"the kernel does not let the owner read the writer's memory (pid {pid}): "
                    f"{error}",
                ) from error
            if error.errno == errno.EFAULT:
                raise RequestError(
                    Status.FAILED, "the write's source is not mapped in the writer"
                ) from error
            raise RequestError(Status.FAILED, f"copying from pid {pid} failed: {error}") from error
        if done == 0:
            raise RequestError(Status.FAILED, "the write's source is not mapped in the writer")
        moved += done


LEASES = "cma leases"


def _disabled(config: _backends.Switches) -> str | None:
    return "cross-memory attach is disabled (disable_cma=True)" if config.disable_cma else None


_backends.register(
    _backends.Registration(
        CmaBackend(),
        rank=20,
        owner_ops={
            ALLOW_ATTACH: _serve_allow,
            CMA_WRITE: _serve_write,
            CMA_LEASE: _serve_lease,
            CMA_RELEASE: _serve_release,
        },
        on_register=prefer_huge_pages,
        advertise=lambda: {"cma": permitted()},
        disabled=_disabled,
        copies_in_caller=True,
    )
)
