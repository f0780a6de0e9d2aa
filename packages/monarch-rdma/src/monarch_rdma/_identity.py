"""Which host and which process this is, in terms two processes can compare.

Cross-memory attach and CUDA IPC work only between processes that can name
each other: same boot of the same kernel, same pid namespace. A pid alone is
not an identity (pids are reused), so an owner is also known by its start
time.
"""

from __future__ import annotations

import functools
import os
import socket

__all__ = ["host_key", "process_start_time", "this_host"]


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


@functools.cache
def this_host() -> str:
    """:func:`host_key` of this process (computed once; a fork keeps both)."""
    return host_key()


def process_start_time(pid: int) -> int:
    """Clock ticks after boot at which ``pid`` started (0 if unknown)."""
    stat = _read(f"/proc/{pid}/stat")
    if not stat:
        return 0
    try:
        return int(stat.rsplit(")", 1)[1].split()[19])
    except (IndexError, ValueError):
        return 0
