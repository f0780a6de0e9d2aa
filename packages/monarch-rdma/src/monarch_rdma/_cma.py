"""The ``cma`` backend: same host, ``process_vm_readv``/``process_vm_writev``
(Linux cross-memory attach). The reader copies straight between its memory
and the owner's: one-sided, the owner's threads not involved at all.

A large transfer is split into pieces copied by several threads at once
(``cma_threads``, one per core by default): one thread's system call is
bound by the per-page work of one core, not by memory bandwidth.

A control step is one 8-byte read of the region's token slot in the owner
(see ``_regions``). A read checks it after the copy, since a token, once
gone, never comes back: if it is still there, the region was registered
throughout. A write checks it before anything moves and again after (a
buffer dropped during the write is reported), and only writes a region
whose token says its owner registered writable memory.

The kernel allows cross-memory attach when the reader may ptrace the owner:
same user (or CAP_SYS_PTRACE), and under Yama's ``ptrace_scope`` 1 only if
the owner named the reader. So there, before its first transfer with an
owner, a reader asks the owner's server to let it attach (``ALLOW_ATTACH``,
authenticated by the job's secret); the owner names as few processes as it
can (see ``_ptrace``). Where the kernel still refuses (``EPERM``: scope 2 or
3, a seccomp filter, another user, an owner that would have to name too
wide an ancestor), the pair falls back to the next backend (tcp) with a
warning, once.

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

from ._backend import OwnerRequest, PairRefused
from ._config import RdmaConfig, get_config
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
from ._regions import Region, writable_token
from ._wire import Channel, RequestError, Status, answer_json, readonly_message

__all__ = [
    "ALLOW_ATTACH",
    "CmaBackend",
    "CmaDenied",
    "copy",
    "permitted",
    "ptrace_scope",
    "supported",
]

ALLOW_ATTACH = 9  # data-plane operation: args {"pid": reader}; the owner lets that reader attach
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
            return f"the kernel refused process_vm_readv to pid {owner.pid} (EPERM)"
        return None

    def transfer(
        self,
        handle: Handle,
        local: LocalMemory,
        remote_offset: int,
        nbytes: int,
        write: bool,
        deadline: float,
    ) -> None:
        remote = handle.addr + remote_offset
        if handle.owner.pid == os.getpid():
            self._in_process(handle, local.addr, remote, nbytes, write)
            return

        def move(offset: int, length: int) -> None:
            _copy_all(handle, local.addr + offset, remote + offset, length, write, deadline)

        try:
            self._allowed(handle, deadline)
            if write:
                check_token(handle, write=True)  # never into memory let go of, nor read-only
                _in_pieces(nbytes, move)
                self._still_registered_after_write(handle)
                return
            try:
                _in_pieces(nbytes, move)
            except (RDMAOwnerGone, CmaDenied, RDMATimeoutError):
                raise
            except RDMATransferError:  # freed memory: say it was dropped, if it was
                check_token(handle)
                raise
            check_token(handle)  # dropped while we read: the bytes may be stale
        except CmaDenied as error:
            owner = handle.owner
            with self.lock:
                self.denied.add((owner.host_key, owner.pid))
            warnings.warn(
                f"process_vm_readv to pid {owner.pid} is not permitted here (ptrace_scope="
                f"{ptrace_scope()}: {error}); falling back to the tcp backend for this owner",
                RDMATcpFallbackWarning,
                stacklevel=2,
            )
            raise

    def _allowed(self, handle: Handle, deadline: float) -> None:
        """Under Yama scope 1, ask the owner once to let this process attach
        (the owner names as few tracers as it can); a refusal is ``CmaDenied``."""
        owner = handle.owner
        key = (owner.host_key, owner.pid, owner.start_time)
        if key in self.allowed:
            return
        if ptrace_scope() == 1:  # the host's setting: read once per owner, not per transfer
            try:
                _control.request(handle, ALLOW_ATTACH, deadline, {"pid": os.getpid()})
            except (RDMABufferDropped, RDMAOwnerGone, RDMATimeoutError):
                raise
            except RDMATransferError as error:  # the owner refused: tcp serves this pair
                raise CmaDenied(str(error)) from error
        with self.lock:
            self.allowed.add(key)

    @staticmethod
    def _still_registered_after_write(handle: Handle) -> None:
        """A write whose buffer was dropped meanwhile is reported, not taken for done."""
        try:
            check_token(handle)
        except RDMABufferDropped as error:
            raise _dropped_during_write(handle) from error

    @staticmethod
    def _in_process(handle: Handle, local: int, remote: int, nbytes: int, write: bool) -> None:
        """The owner is this process: memmove, after the same checks."""
        region = _owner.regions().lookup(handle.buffer_id, handle.token)
        if region is None:
            raise _dropped(handle)
        if write and region.memory.readonly:
            raise RDMATransferError(readonly_message(handle.buffer_id))
        src, dst = (local, remote) if write else (remote, local)

        def move(offset: int, length: int) -> None:
            ctypes.memmove(dst + offset, src + offset, length)

        _in_pieces(nbytes, move)
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
        self.thread = threading.Thread(target=self._run, name="monarch-rdma-hugepages", daemon=True)
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


def _serve_allow(chan: Channel, request: OwnerRequest) -> None:
    """Owner side of ``ALLOW_ATTACH``: let the asking reader attach to us.
    Only a holder of a live buffer of ours, over an authenticated connection."""
    request.registered()
    pid = request.args.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        raise RequestError(Status.BAD_REQUEST, f"ALLOW_ATTACH needs a process id, not {pid!r}")
    try:
        tracer = _ptrace.policy.allow(pid)
    except PermissionError as error:
        raise RequestError(Status.FAILED, str(error)) from error
    answer_json(chan, {"tracer": tracer})


def _disabled(config: RdmaConfig) -> str | None:
    return "cross-memory attach is disabled (disable_cma=True)" if config.disable_cma else None


_backends.register(
    _backends.Registration(
        CmaBackend(),
        rank=20,
        owner_ops={ALLOW_ATTACH: _serve_allow},
        on_register=prefer_huge_pages,
        advertise=lambda: {"cma": permitted()},
        disabled=_disabled,
        copies_in_caller=True,
    )
)
