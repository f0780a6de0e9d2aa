"""``RDMABuffer``, ``RDMAAction`` and the module functions of ``monarch.rdma``."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import ctypes
import operator
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import monarch_rdma._backends as _backends
import monarch_rdma._control as _control
import monarch_rdma._owner as _owner
from monarch_actor import Future
from monarch_actor.extension import Progress, future_from, progress, resolved, shows_progress

from ._backend import RdmaBackend, Transfer
from ._config import get_config
from ._cuda_memory import check_allocator
from ._handle import Handle
from ._memory import LocalMemory, as_local_memory
from ._parallel import workers
from ._select import choose, run_transfer
from ._wire import Op

__all__ = [
    "RDMAAction",
    "RDMABuffer",
    "get_rdma_backend",
    "is_ibverbs_available",
    "is_rdma_available",
]

U64 = (1 << 64) - 1
LOOP_INLINE_BYTES = 4 << 20  # the largest copy run in an event loop's own thread (about 1 ms)
IBVERBS = "ibverbs"  # Monarch names this backend in its API (get_rdma_backend)


def _usable(name: str) -> bool:
    registration = _backends.by_name(name)
    if registration is None:
        return False
    return registration.disabled(get_config()) is None and registration.backend.available()


def is_ibverbs_available() -> bool:
    """Whether ibverbs RDMA hardware is usable in this process."""
    return _usable(IBVERBS)


def is_rdma_available() -> bool:
    """Deprecated alias of [`is_ibverbs_available`][monarch_rdma.is_ibverbs_available].

    Kept as in Monarch; each call emits a ``DeprecationWarning``. Use
    ``is_ibverbs_available()`` or ``get_rdma_backend()`` instead.
    """
    warnings.warn(
        "is_rdma_available is deprecated because Monarch now supports multiple RDMA backends, "
        "making this function ambiguous. For now it indicates whether RDMA over ibverbs is "
        "available. Use is_ibverbs_available() or get_rdma_backend() instead.",
        DeprecationWarning,
        stacklevel=2,
    )
    return is_ibverbs_available()


def get_rdma_backend() -> str:
    """The kind of transport this process uses, in Monarch's three answers.

    ``RDMABuffer.backend`` tells the exact backend of one buffer.

    Returns:
        ``"ibverbs"`` with usable RDMA hardware; ``"tcp"`` when the fallbacks
            (same-host ``cma``, ``tcp``, ``cuda_ipc``) are what this process
            uses; ``"none"`` when the settings allow no backend.
    """
    if is_ibverbs_available():
        return IBVERBS
    if any(_usable(name) for name in _backends.names() if name != IBVERBS):
        return "tcp"
    return "none"


def _timeout(timeout: Any) -> int:
    value = operator.index(timeout)
    if value < 0 or value > U64:
        raise OverflowError("timeout must fit in an unsigned 64-bit integer")
    return int(value)


def _offset(offset: Any) -> int:
    value = operator.index(offset)
    if value < 0:
        raise ValueError(f"offset must be >= 0, got {value}")
    return int(value)


class RDMABuffer:
    """A registered range of memory that other processes read and write
    one-sidedly.

    Pickle the buffer (return it from an endpoint, pass it as an argument)
    and the receiver gets a small handle to the same memory; it then calls
    ``read_into`` or ``write_from`` without the owner's code running. The
    owner must keep the memory alive and unchanged while others transfer,
    until ``drop()``; the registration holds a reference to ``data``.

    Args:
        data: the memory to register, without copying it: a 1-D contiguous
            torch tensor of any dtype (CPU or CUDA), a 1-D C-contiguous
            memoryview, or a 1-D C-contiguous numpy array. Read-only memory
            can be registered and read, but not written.

    Raises:
        ValueError: ``data`` is not 1-D and contiguous, is of an unsupported
            kind or device, or is empty.
        RuntimeError: no backend is usable in this process
            (``get_rdma_backend()`` is ``"none"``).
    """

    __slots__ = ("__weakref__", "_handle")

    def __init__(self, data: Any) -> None:
        memory = as_local_memory(data)
        if memory.nbytes == 0:
            raise ValueError("Cannot create RDMABuffer with size 0.")
        if memory.is_cuda:
            check_allocator()
        if get_rdma_backend() == "none":
            raise RuntimeError(
                "Tried to create an RDMABuffer, but RDMA is not available on this platform. "
                "To enable TCP fallback transport, call "
                "monarch.configure(rdma_allow_tcp_fallback=True) (here: "
                "monarch_rdma.configure(allow_tcp_fallback=True)) before creating buffers."
            )
        self._handle: Handle = _owner.register(memory)

    @classmethod
    def _from_handle(cls, handle: Handle) -> RDMABuffer:
        buffer = cls.__new__(cls)
        buffer._handle = handle
        return buffer

    def __reduce__(self) -> tuple[Any, tuple[Handle]]:
        return (_rebuild, (self._handle,))

    def size(self) -> int:
        """The size of the buffer in bytes."""
        return self._handle.nbytes

    @property
    def owner(self) -> str:
        """The process that owns the memory."""
        return self._handle.owner.name

    @property
    def backend(self) -> str:
        """The backend a transfer from this process to this buffer uses now:
        ``"ibverbs"``, ``"cma"``, ``"tcp"``, ``"cuda_ipc"`` or ``"none"``."""
        probe = LocalMemory(0, 0, "cpu", False, None)
        try:
            return choose(self._handle, probe, warn=False).name
        except Exception:
            return "none"

    def read_into(self, dst: Any, *, timeout: int = 60, offset: int | None = None) -> Future[None]:
        """Copy this buffer into local memory ``dst``.

        Args:
            dst: the local memory to fill, of a kind ``RDMABuffer`` accepts.
                Without ``offset`` (Monarch's form) it must hold at least
                ``size()`` bytes, and its first ``size()`` bytes are filled.
            timeout: seconds the transfer may take before it fails with
                ``RDMATimeoutError``.
            offset: read exactly ``dst``'s size in bytes from this byte of the
                buffer on (an extension of Monarch's API).

        Returns:
            A future resolving to ``None`` once the bytes are in ``dst``; it
                fails with an ``RDMAError`` subclass if the transfer does.

        Raises:
            ValueError: ``dst`` is not 1-D contiguous, is read-only or too
                small, or the range lies outside the buffer.
            TypeError: ``timeout`` is not an integer.
            OverflowError: ``timeout`` is negative or too large.
        """
        return RDMAAction().read_remote(dst, self, offset=offset).submit(timeout=timeout)

    def write_from(self, src: Any, *, timeout: int = 60, offset: int | None = None) -> Future[None]:
        """Copy local memory ``src`` into this buffer.

        Args:
            src: the local memory to send, of a kind ``RDMABuffer`` accepts;
                without ``offset``, at most ``size()`` bytes.
            timeout: seconds the transfer may take before it fails with
                ``RDMATimeoutError``.
            offset: the byte of the buffer the data goes to (0 when omitted);
                ``src`` must then fit between it and the buffer's end.

        Returns:
            A future resolving to ``None`` once the bytes are in the buffer;
                it fails with an ``RDMAError`` subclass if the transfer does.

        Raises:
            ValueError: ``src`` is not 1-D contiguous or does not fit, or the
                buffer was registered from read-only memory.
            TypeError: ``timeout`` is not an integer.
            OverflowError: ``timeout`` is negative or too large.
        """
        return RDMAAction().write_remote(self, src, offset=offset).submit(timeout=timeout)

    def drop(self) -> Future[None]:
        """Release the registration (from the owner or from any holder).

        Later transfers fail with ``RDMABufferDropped``; dropping twice is
        harmless.

        Returns:
            A future resolving to ``None`` once the owner has released it.
        """
        handle = self._handle
        if _owner.local_owner() == handle.owner:  # this process owns it
            _owner.regions().drop(handle.buffer_id, handle.token)
            return resolved(None)

        def drop_remote() -> None:
            _control.request(handle, Op.DROP, time.monotonic() + 60)

        return future_from(workers().submit(drop_remote))

    def __repr__(self) -> str:
        h = self._handle
        return f"<RDMABuffer {h.buffer_id} of {h.nbytes} bytes ({h.device}) owned by {self.owner}>"


def _rebuild(handle: Handle) -> RDMABuffer:
    return RDMABuffer._from_handle(handle)


@dataclass(frozen=True)
class _Op:
    handle: Handle
    local: LocalMemory
    remote_offset: int
    nbytes: int
    write: bool
    atomic: dict[str, int] | None = None


LARGE_TRANSFER = 256 << 20  # bytes: a transfer this large shows a progress line
# bytes a large transfer moves at a time while its progress is shown (when it
# is not, the backend gets the whole range: pieces cost a round trip each)
PIECE = 64 << 20


def _line_for(ops: list[_Op]) -> contextlib.AbstractContextManager[Progress] | None:
    """A progress line for an action large enough to show one, when progress
    lines are shown; else ``None``."""
    total = sum(op.nbytes for op in ops)
    if total < LARGE_TRANSFER or not shows_progress():
        return None
    verbs = sorted({"writing to" if op.write else "reading from" for op in ops})
    owners = sorted({(op.handle.owner.hostname, op.handle.owner.pid) for op in ops})
    if len(owners) == 1:
        whom = f"pid {owners[0][1]} on {owners[0][0]}"
    else:
        whom = f"{len(owners)} processes"
    return progress(f"RDMA: {' and '.join(verbs)} {whom}", total=total, unit="bytes")


class RDMAAction:
    """A batch of transfers submitted as one unit.

    ``read_remote``, ``write_remote`` and the atomics queue operations (their
    arguments are checked at once, and each returns the action so calls
    chain); ``submit()`` starts them all, concurrently, and returns a future
    that resolves when every one is done, failing with the first failure. A
    batch can be submitted again. The order of operations inside a batch is
    not guaranteed.
    """

    def __init__(self) -> None:
        self._ops: list[_Op] = []

    def read_remote(self, dst: Any, src: RDMABuffer, *, offset: int | None = None) -> RDMAAction:
        """Queue a read of RDMA buffer ``src`` into local memory ``dst``.

        Args:
            dst: the local memory to fill (1-D contiguous, writable). Without
                ``offset`` it must hold at least ``src.size()`` bytes.
            src: the buffer to read.
            offset: read exactly ``dst``'s size in bytes from this byte of
                ``src`` on, instead of the whole buffer.

        Returns:
            This action, to chain further calls.

        Raises:
            TypeError: ``src`` is not an ``RDMABuffer``.
            ValueError: ``dst`` is not 1-D contiguous, is read-only or too
                small, or the range lies outside ``src``.
        """
        local = as_local_memory(dst)
        handle = _handle_of(src)
        if local.readonly:
            raise ValueError("destination local memory is read-only; it cannot be read into")
        if offset is None:
            if local.nbytes < handle.nbytes:
                raise ValueError(
                    f"destination local memory size ({local.nbytes}) must be >= remote buffer "
                    f"size ({handle.nbytes})"
                )
            start, nbytes = 0, handle.nbytes
        else:
            start, nbytes = _offset(offset), local.nbytes
            _check_range(handle, start, nbytes, "read")
        self._ops.append(_Op(handle, local, start, nbytes, False))
        return self

    def write_remote(self, dst: RDMABuffer, src: Any, *, offset: int | None = None) -> RDMAAction:
        """Queue a write of local memory ``src`` into RDMA buffer ``dst``.

        Args:
            dst: the buffer to write; it must not have been registered from
                read-only memory.
            src: the local memory to send (1-D contiguous); without
                ``offset``, at most ``dst.size()`` bytes.
            offset: the byte of ``dst`` the data goes to (0 when omitted).

        Returns:
            This action, to chain further calls.

        Raises:
            TypeError: ``dst`` is not an ``RDMABuffer``.
            ValueError: ``src`` is not 1-D contiguous or does not fit, or
                ``dst`` is read-only.
        """
        local = as_local_memory(src)
        handle = _handle_of(dst)
        if handle.readonly:
            raise ValueError(
                f"RDMA buffer {handle.buffer_id} was registered from read-only memory; it "
                "cannot be written"
            )
        start = 0 if offset is None else _offset(offset)
        if offset is None and local.nbytes > handle.nbytes:
            raise ValueError(
                f"source local memory size ({local.nbytes}) must be <= remote buffer size "
                f"({handle.nbytes})"
            )
        _check_range(handle, start, local.nbytes, "write")
        self._ops.append(_Op(handle, local, start, local.nbytes, True))
        return self

    def fetch_add(self, src: RDMABuffer, dst: Any, add: int, *, offset: int = 0) -> RDMAAction:
        """Queue an atomic add to an unsigned 64-bit word of buffer ``src``.

        Atomic with respect to every other RDMA atomic on that owner (the
        owner's data-plane server executes them all). The sum wraps around
        modulo ``2**64``.

        Args:
            src: the buffer holding the word: writable host memory.
            dst: where the word's previous value lands: at least 8 writable
                bytes of host memory (native byte order).
            add: the amount to add, taken modulo ``2**64``.
            offset: the byte of ``src`` the word starts at; must be 8-byte
                aligned.

        Returns:
            This action, to chain further calls.

        Raises:
            TypeError: ``src`` is not an ``RDMABuffer``.
            ValueError: ``dst`` or ``src`` is unsuitable (CUDA, read-only,
                too small), or the word is misaligned or out of bounds.
        """
        local, handle, start = self._atomic_args(src, dst, offset)
        value = operator.index(add) & U64
        self._ops.append(_Op(handle, local, start, 8, False, {"add": value}))
        return self

    def compare_and_swap(
        self, src: RDMABuffer, dst: Any, compare: int, swap: int, *, offset: int = 0
    ) -> RDMAAction:
        """Queue an atomic compare-and-swap of an unsigned 64-bit word of buffer
        ``src``: the word becomes ``swap`` if it equals ``compare``.

        Atomic with respect to every other RDMA atomic on that owner.

        Args:
            src: the buffer holding the word: writable host memory.
            dst: where the word's previous value lands (whether or not it
                was swapped): at least 8 writable bytes of host memory.
            compare: the value the word must hold for the swap, modulo ``2**64``.
            swap: the value stored if it does, modulo ``2**64``.
            offset: the byte of ``src`` the word starts at; must be 8-byte
                aligned.

        Returns:
            This action, to chain further calls.

        Raises:
            TypeError: ``src`` is not an ``RDMABuffer``.
            ValueError: ``dst`` or ``src`` is unsuitable (CUDA, read-only,
                too small), or the word is misaligned or out of bounds.
        """
        local, handle, start = self._atomic_args(src, dst, offset)
        args = {"compare": operator.index(compare) & U64, "swap": operator.index(swap) & U64}
        self._ops.append(_Op(handle, local, start, 8, False, args))
        return self

    @staticmethod
    def _atomic_args(src: RDMABuffer, dst: Any, offset: int) -> tuple[LocalMemory, Handle, int]:
        local = as_local_memory(dst)
        handle = _handle_of(src)
        start = _offset(offset)
        if local.nbytes < 8 or local.readonly or local.is_cuda:
            raise ValueError("an atomic's destination must be 8 writable bytes of host memory")
        if handle.readonly or handle.is_cuda:
            raise ValueError("atomics need a writable host-memory RDMA buffer")
        _check_range(handle, start, 8, "atomic on")
        if (handle.addr + start) % 8:
            raise ValueError(f"atomics need an 8-byte aligned word; offset {start} is not")
        return local, handle, start

    def submit(self, *, timeout: int = 60) -> Future[None]:
        """Start every queued operation, concurrently.

        Args:
            timeout: seconds every operation may take before it fails with
                ``RDMATimeoutError``.

        Returns:
            A future resolving to ``None`` when all operations are done, or
                failing with the first failure (an ``RDMAError`` subclass such as
                ``RDMATimeoutError``, ``RDMABufferDropped``, ``RDMAOwnerGone`` or
                ``RDMABackendUnavailable``) once every operation has finished.

        Raises:
            TypeError: ``timeout`` is not an integer.
            OverflowError: ``timeout`` is negative or too large.
        """
        seconds = _timeout(timeout)
        deadline = time.monotonic() + min(seconds, 10**9)
        ops = list(self._ops)
        if not ops:
            return resolved(None)
        if len(ops) == 1 and ops[0].atomic is None:
            op = ops[0]
            try:
                backend = choose(op.handle, op.local)
                if _copies_here(backend.name, op.nbytes):
                    shown = _line_for(ops) if _in_pieces(backend) else None
                    if shown is None:
                        _move(op, deadline, backend)
                    else:
                        with shown as line:
                            _move(op, deadline, backend, line.advance)
                    return resolved(None)
            except Exception as error:
                return _failed(error)
        shown = _line_for(ops)
        showing = contextlib.ExitStack()  # the line goes once every operation is done
        advance = None if shown is None else showing.enter_context(shown).advance
        futures = [workers().submit(_execute, op, deadline, advance) for op in ops]
        result: concurrent.futures.Future[None] = concurrent.futures.Future()
        remaining = [len(futures)]
        lock = threading.Lock()

        def one_done(_: concurrent.futures.Future[None]) -> None:
            with lock:
                remaining[0] -= 1
                if remaining[0]:
                    return
            showing.close()
            for future in futures:  # every op has finished: report the first failure
                error = future.exception()
                if error is not None:
                    result.set_exception(error)
                    return
            result.set_result(None)

        for future in futures:
            future.add_done_callback(one_done)
        return future_from(result)


def _copies_here(backend: str, nbytes: int) -> bool:
    """Whether a single transfer runs in the calling thread: only for a
    backend that copies memory (``Registration.copies_in_caller``), and in a
    thread that runs an event loop only when short, so the loop never stalls."""
    registration = _backends.by_name(backend)
    if registration is None or not registration.copies_in_caller:
        return False
    return nbytes <= LOOP_INLINE_BYTES or not _in_event_loop()


def _in_pieces(backend: RdmaBackend | None) -> bool:
    """Whether a large transfer with ``backend`` moves in pieces under a
    progress line (``Registration.in_pieces``)."""
    registration = None if backend is None else _backends.by_name(backend.name)
    return registration is None or registration.in_pieces


def _in_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _failed(error: BaseException) -> Future[None]:
    cf: concurrent.futures.Future[None] = concurrent.futures.Future()
    cf.set_exception(error)
    return future_from(cf)


def _execute(op: _Op, deadline: float, moved: Callable[[int], None] | None) -> None:
    if op.atomic is not None:  # executed by the owner's server: atomic against all others
        code = Op.FETCH_ADD if "add" in op.atomic else Op.COMPARE_SWAP
        args = dict(op.atomic)
        value, _ = _control.request(op.handle, code, deadline, args, offset=op.remote_offset)
        ctypes.c_uint64.from_address(op.local.addr).value = value
        return
    _move(op, deadline, None, moved)


def _move(
    op: _Op,
    deadline: float,
    backend: RdmaBackend | None,
    moved: Callable[[int], None] | None = None,
) -> None:
    """Run one transfer; with ``moved``, in pieces of ``PIECE`` bytes, each
    reported (``moved(nbytes)``) as it lands."""
    whole = Transfer(op.handle, op.local, op.remote_offset, op.nbytes, op.write, deadline)
    if moved is not None and op.nbytes > PIECE and backend is None:
        backend = choose(op.handle, op.local)
    if moved is None or op.nbytes <= PIECE or not _in_pieces(backend):
        run_transfer(whole, backend)
        if moved is not None:
            moved(op.nbytes)
        return
    for start in range(0, op.nbytes, PIECE):
        length = min(PIECE, op.nbytes - start)
        piece = replace(op.local, addr=op.local.addr + start, nbytes=length)
        run_transfer(
            replace(whole, local=piece, remote_offset=op.remote_offset + start, nbytes=length),
            backend,
        )
        moved(length)


def _handle_of(buffer: object) -> Handle:
    if not isinstance(buffer, RDMABuffer):
        raise TypeError(f"expected an RDMABuffer, got {type(buffer).__name__}")
    return buffer._handle


def _check_range(handle: Handle, start: int, nbytes: int, what: str) -> None:
    if start + nbytes > handle.nbytes:
        raise ValueError(
            f"{what} of {nbytes} bytes at offset {start} is out of bounds of the remote buffer "
            f"({handle.nbytes} bytes)"
        )
