"""Local processes a job started, known by pid and start time (so a pid the
system reused for another program is never mistaken for a worker), waited
for without polling where Linux allows (``pidfd_open``), and ended with
everything they started."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import time
from dataclasses import dataclass

__all__ = ["LocalProcess", "end_sessions", "process_start_time"]


def process_start_time(pid: int) -> int | None:
    """When ``pid`` started (clock ticks since boot, from ``/proc``), or None
    if there is no such process (or it is a zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    if fields[0] in ("Z", "X", "x"):
        return None
    return int(fields[19])


@dataclass(frozen=True)
class LocalProcess:
    """A process on this machine: its pid, when it started, and the address
    it serves (a worker's), if any."""

    pid: int
    started: int | None
    address: str = ""

    @classmethod
    def of(cls, pid: int, address: str = "") -> LocalProcess:
        """The process ``pid`` as it is now."""
        return cls(pid, process_start_time(pid), address)

    def alive(self) -> bool:
        """True while this very process (not a later one with its pid) runs."""
        now = process_start_time(self.pid)
        return now is not None and (self.started is None or now == self.started)

    def wait_exit(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for it to end; True if it has."""
        if not self.alive():
            return True
        try:
            fd = os.pidfd_open(self.pid)
        except (OSError, AttributeError):
            fd = -1
        if fd >= 0:
            try:
                select.select([fd], [], [], timeout)
            finally:
                os.close(fd)
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(self.pid, os.WNOHANG)  # reap it if it is our child
            return not self.alive()
        deadline = time.monotonic() + timeout  # no pidfd: look now and then
        while self.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        return not self.alive()


def _session_members(sessions: set[int]) -> list[int]:
    """Every live process in one of ``sessions`` (this one excepted)."""
    found = []
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        pid = int(entry)
        try:
            if os.getsid(pid) in sessions and process_start_time(pid) is not None:
                found.append(pid)
        except OSError:
            continue
    return found


def end_sessions(leaders: list[LocalProcess], grace: float = 5.0, patience: float = 0.0) -> None:
    """End each leader (started with a session of its own) and every process
    in its session: up to ``patience`` seconds to exit on their own, then
    SIGTERM, up to ``grace`` seconds to exit, then SIGKILL."""
    if patience > 0:
        deadline = time.monotonic() + patience
        for process in leaders:
            process.wait_exit(max(0.0, deadline - time.monotonic()))
    live = [p for p in leaders if p.alive()]
    if not live:
        return
    sessions = {p.pid for p in live}

    def signal_all(sig: int) -> None:
        for pid in _session_members(sessions):
            with contextlib.suppress(OSError):
                os.kill(pid, sig)

    signal_all(signal.SIGTERM)
    deadline = time.monotonic() + grace
    for process in live:
        process.wait_exit(max(0.0, deadline - time.monotonic()))
    signal_all(signal.SIGKILL)
    for process in live:
        process.wait_exit(1.0)
