"""Who may attach to this process's memory (cross-memory attach, ``cma``).

The kernel lets a process ``process_vm_readv``/``writev`` another only if
it may ptrace it: same user (or ``CAP_SYS_PTRACE``) and, under Yama's
``ptrace_scope`` 1, only an ancestor of the target or the one process the
target named with ``prctl(PR_SET_PTRACER, pid)`` (and that process's
descendants). ``PR_SET_PTRACER_ANY`` would let every process of the user
attach for the rest of the owner's life; an owner never sets it.

Instead an owner names, on request, the *nearest common ancestor* of the
readers that asked (each request authenticated by the job's secret, see
``_cma``): the first reader itself, then, as others ask, the lowest process
that has all of them below it. Only one tracer can be named at a time, so
covering several readers means naming an ancestor, whose other descendants
gain access too; an ancestor that would cover too much (init, a session
leader such as a login shell, another user's process) is refused, and that
reader falls back to tcp. Without Yama, or with ``ptrace_scope`` 0, every
process of the same user may already attach and there is nothing to name.
"""

from __future__ import annotations

import ctypes
import os
import threading

__all__ = [
    "PR_SET_PTRACER",
    "PR_SET_PTRACER_ANY",
    "TracerPolicy",
    "ancestors",
    "policy",
    "ptrace_scope",
]

PR_SET_PTRACER = 0x59616D61
PR_SET_PTRACER_ANY = (1 << 64) - 1  # (unsigned long)-1: never passed, named for the tests

_libc = ctypes.CDLL(None, use_errno=True)
_prctl = _libc.prctl
_prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
_prctl.restype = ctypes.c_int


def ptrace_scope() -> int | None:
    """Yama's ``kernel.yama.ptrace_scope`` (None without Yama)."""
    try:
        with open("/proc/sys/kernel/yama/ptrace_scope") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, start time) of ``pid``, or None if it does not exist."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read()
    except OSError:
        return None
    fields = text[text.rindex(b")") + 2 :].split()  # the name may hold spaces and ')'
    return int(fields[1]), int(fields[19])


def ancestors(pid: int) -> list[int]:
    """``pid`` and its ancestors, nearest first (empty if ``pid`` is gone)."""
    chain: list[int] = []
    while pid > 0 and pid not in chain:
        stat = _stat(pid)
        if stat is None:
            break
        chain.append(pid)
        pid = stat[0]
    return chain


def _too_wide(pid: int) -> str | None:
    """Why naming ``pid`` as tracer would let too many processes attach."""
    if pid <= 1:
        return "it would be init, the ancestor of every process"
    try:
        if os.stat(f"/proc/{pid}").st_uid != os.geteuid():
            return f"process {pid} belongs to another user"
        if os.getsid(pid) == pid:
            return f"process {pid} is a session leader (a login shell or a service manager)"
    except OSError:
        return f"process {pid} is gone"
    return None


def _set_tracer(pid: int) -> None:
    if _prctl(PR_SET_PTRACER, pid, 0, 0, 0) != 0:
        code = ctypes.get_errno()
        raise PermissionError(f"prctl(PR_SET_PTRACER, {pid}) failed: {os.strerror(code)}")


class TracerPolicy:
    """The owner's choice of tracer, widened only as far as its readers need."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.tracer: tuple[int, int] | None = None  # (pid, start time): a reused pid is not it

    def _current(self) -> int | None:
        if self.tracer is None:
            return None
        pid, start = self.tracer
        stat = _stat(pid)
        return pid if stat is not None and stat[1] == start else None

    def allow(self, reader: int) -> int | None:
        """Let process ``reader`` attach to this one; returns the tracer now
        named (None: nothing needed naming). ``PermissionError`` says why
        the reader cannot be let in."""
        if ptrace_scope() != 1:
            return None  # no Yama, or scope 0: the kernel allows it already; 2, 3: nothing does
        chain = ancestors(reader)
        if not chain:
            raise PermissionError(f"process {reader} does not exist on this host")
        with self._lock:
            if reader in ancestors(os.getpid()):
                return None  # an ancestor may attach to its descendants anyway
            tracer = self._current()
            if tracer is not None and tracer in chain:
                return tracer  # already covered
            if tracer is None:
                candidate = reader
            else:
                covered = set(ancestors(tracer))
                candidate = next((pid for pid in chain if pid in covered), 0)
            why = _too_wide(candidate)
            if why is not None:
                raise PermissionError(
                    f"cannot let process {reader} attach to this owner: the only tracer covering "
                    f"it and the readers before it would be process {candidate}, and {why}"
                )
            _set_tracer(candidate)
            stat = _stat(candidate)
            self.tracer = (candidate, stat[1]) if stat else None
            return candidate


policy = TracerPolicy()


def _after_fork() -> None:
    global policy
    policy = TracerPolicy()  # a forked child has named no tracer


os.register_at_fork(after_in_child=_after_fork)
