"""Liveness policy: how long a process may stay silent, and what its exit
status means in words."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Hashable

__all__ = ["DEFAULT_HEARTBEAT_DEADLINE", "HeartbeatMonitor", "exit_reason"]

DEFAULT_HEARTBEAT_DEADLINE = 10.0  # seconds without a heartbeat before a process is dead
"""Seconds a process may send no heartbeat before it counts as dead (the runtime's
default; ``MONARCH_HEARTBEAT_DEADLINE`` overrides it)."""


class HeartbeatMonitor:
    """Deadlines for the peers being watched, on an injectable clock.

    Each silent peer is reported once by ``overdue`` and then no longer watched.

    Args:
        deadline: seconds a peer may stay silent before ``overdue`` reports it.
        clock: returns the current time in seconds; pass a fake one in tests.

    Attributes:
        deadline: seconds a peer may stay silent before ``overdue`` reports it.
        clock: the time source, in seconds.

    Raises:
        ValueError: ``deadline`` is not positive.
    """

    def __init__(self, deadline: float, clock: Callable[[], float] = time.monotonic) -> None:
        if not deadline > 0:
            raise ValueError(f"the heartbeat deadline must be positive, got {deadline!r}")
        self.deadline = deadline
        self.clock = clock
        self._last: dict[Hashable, float] = {}

    @property
    def interval(self) -> float:
        """How often a watched peer should beat: several beats fit in a deadline."""
        return self.deadline / 5

    def watch(self, peer: Hashable) -> None:
        """Start watching ``peer``, as if it had just beaten.

        Args:
            peer: any hashable key for the peer (the runtime uses ``(proc mesh, rank)``).
        """
        self._last[peer] = self.clock()

    def beat(self, peer: Hashable) -> None:
        """Note a sign of life from ``peer``; ignored if it is not being watched.

        Args:
            peer: the key given to ``watch``.
        """
        if peer in self._last:
            self._last[peer] = self.clock()

    def forget(self, peer: Hashable) -> None:
        """Stop watching ``peer`` (it exited or was stopped); no error if it was not watched.

        Args:
            peer: the key given to ``watch``.
        """
        self._last.pop(peer, None)

    def watching(self) -> list[Hashable]:
        """The peers being watched now."""
        return list(self._last)

    def overdue(self) -> list[tuple[Hashable, float]]:
        """Peers silent for longer than the deadline, with how long."""
        now = self.clock()
        late = [(p, now - t) for p, t in self._last.items() if now - t > self.deadline]
        for peer, _ in late:
            del self._last[peer]
        return late


def exit_reason(code: int, *details: str) -> str:
    """What an exit status says happened to a process, as a sentence for a failure reason.

    Monarch's words come first ("... exited with non-zero code 1", "... failed:
    Killed(sig=9)"), then, in parentheses, what else is known.

    Args:
        code: the exit status; negative when the process was killed by signal ``-code``.
        details: more to say in the parentheses (which process it was, say).

    Returns:
        The reason, naming the signal and, for common crashes (``SIGKILL``, ``SIGSEGV``,
        ``SIGABRT``, ``SIGBUS``), their likely cause.
    """
    notes: list[str] = []
    if code == 0:
        words = "the process this actor was running on exited with code 0 before it was stopped"
    elif code > 0:
        words = f"the process this actor was running on exited with non-zero code {code}"
    else:
        words = f"the process this actor was running on failed: Killed(sig={-code})"
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hint = {
            "SIGKILL": ": by a user, a timeout, or the kernel's out-of-memory killer",
            "SIGSEGV": ": a segmentation fault, a crash in native code",
            "SIGABRT": ": aborted, a failed assertion in native code",
            "SIGBUS": ": a bus error, bad memory access in native code",
        }.get(name, "")
        notes.append(f"killed by {name}{hint}")
    notes.extend(detail for detail in details if detail)
    return f"{words} ({'; '.join(notes)})" if notes else words
