"""The ``cma`` backend: same host, ``process_vm_readv``/``process_vm_writev``
(Linux cross-memory attach). The reader copies straight between its memory
and the owner's, with one system call per piece: one-sided, at memcpy speed,
the owner's threads not involved at all.

The kernel allows it when the reader may ptrace the owner: same user (or
CAP_SYS_PTRACE), and under Yama's ``ptrace_scope`` 1 only if the owner named
its readers; an owner calls ``prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY)`` on
its first registration. Where the kernel still refuses (``EPERM``: scope 2
or 3, a seccomp filter, another user), the pair falls back to ``tcp`` with a
warning, once.
"""

from __future__ import annotations

import ctypes
import errno
import os
import threading
import time
import warnings

from ._errors import (
    RDMABufferDropped,
    RDMAOwnerGone,
    RDMATcpFallbackWarning,
    RDMATimeoutError,
    RDMATransferError,
)
from ._memory import LocalMemory
from ._registry import Handle, host_key, registry

__all__ = ["CmaBackend", "CmaDenied", "allow_peers", "ptrace_scope"]

PR_SET_PTRACER = 0x59616D61
PR_SET_PTRACER_ANY = (1 << 64) - 1  # (unsigned long)-1
PIECE = 256 << 20  # one system call moves at most this much; the deadline is checked between


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
_prctl = _libc.prctl
_prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
_prctl.restype = ctypes.c_int


class CmaDenied(Exception):
    """The kernel refused cross-memory attach to this owner (``EPERM``)."""


def ptrace_scope() -> int | None:
    """Yama's ``kernel.yama.ptrace_scope`` (None without Yama)."""
    try:
        with open("/proc/sys/kernel/yama/ptrace_scope") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def allow_peers() -> bool:
    """In an owner: let same-user processes attach to our memory. False where
    the system forbids it for certain (no syscall, Yama scope 2 or 3)."""
    if _readv is None or _writev is None:
        return False
    scope = ptrace_scope()
    if scope is not None and scope >= 2:
        return os.geteuid() == 0 and scope == 2  # scope 2: CAP_SYS_PTRACE only
    if scope == 1:
        _prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0)  # failure shows up as EPERM later
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


class CmaBackend:
    name = "cma"

    def __init__(self) -> None:
        self.denied: set[tuple[str, int]] = set()
        self.lock = threading.Lock()
        self._host = host_key()

    def available(self) -> bool:
        return supported()

    def unsupported(self, handle: Handle, local: LocalMemory) -> str | None:
        owner = handle.owner
        if not self.available():
            return "this C library has no process_vm_readv"
        if owner.host_key != self._host:
            return "the owner is on another host (or in another pid namespace)"
        if handle.is_cuda or local.is_cuda:
            return "cross-memory attach moves host memory only, not CUDA memory"
        if not owner.cma_ready:
            return "the owner's system forbids cross-memory attach (Yama ptrace_scope)"
        if (owner.host_key, owner.pid) in self.denied:
            return f"the kernel refused process_vm_readv to pid {owner.pid} (EPERM)"
        return None

    def check_token(self, handle: Handle) -> None:
        """The owner still registers the buffer (one 8-byte read of its slot)."""
        cell = ctypes.c_uint64(0)
        _copy_all(handle, ctypes.addressof(cell), handle.slot_addr, 8, False, float("inf"))
        if cell.value != handle.token:
            raise RDMABufferDropped(
                f"buffer {handle.buffer_id} is not registered at its owner (pid "
                f"{handle.owner.pid}): it was dropped (RDMABuffer.drop())"
            )

    def transfer(
        self,
        handle: Handle,
        local: LocalMemory,
        remote_offset: int,
        nbytes: int,
        write: bool,
        deadline: float,
    ) -> None:
        if handle.owner.pid == os.getpid():
            self._local(handle, local, remote_offset, nbytes, write)
            return
        try:
            self.check_token(handle)
            _copy_all(handle, local.addr, handle.addr + remote_offset, nbytes, write, deadline)
            if not write:
                self.check_token(handle)  # dropped while we read: the bytes may be stale
        except CmaDenied:
            owner = handle.owner
            with self.lock:
                self.denied.add((owner.host_key, owner.pid))
            warnings.warn(
                f"process_vm_readv to pid {owner.pid} is not permitted here (ptrace_scope="
                f"{ptrace_scope()}); falling back to the tcp backend for this owner",
                RDMATcpFallbackWarning,
                stacklevel=2,
            )
            raise

    @staticmethod
    def _local(
        handle: Handle, local: LocalMemory, remote_offset: int, nbytes: int, write: bool
    ) -> None:
        """The owner is this process: a plain memmove, after the same checks."""
        region = registry().lookup(handle.buffer_id, handle.token)
        if region is None:
            raise RDMABufferDropped(
                f"buffer {handle.buffer_id} is not registered: it was dropped (RDMABuffer.drop())"
            )
        remote = handle.addr + remote_offset
        if write:
            ctypes.memmove(remote, local.addr, nbytes)
        else:
            ctypes.memmove(local.addr, remote, nbytes)


def supported() -> bool:
    """Whether this C library has ``process_vm_readv`` and ``process_vm_writev``."""
    return _readv is not None and _writev is not None
