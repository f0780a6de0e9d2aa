"""What an actor has been doing, kept cheaply for the mesh admin: counters,
the handler running now, and a small flight recorder of recent events."""

from __future__ import annotations

import collections
import time
from typing import Any, Final

__all__ = ["FLIGHT_RECORDER", "ActorStats"]

FLIGHT_RECORDER: Final = 64  # recent events kept per actor


class ActorStats:
    """Counters and recent events of one actor (written by its own thread only)."""

    __slots__ = (
        "busy_seconds",
        "current",
        "current_since",
        "events",
        "failures",
        "last_handler",
        "messages",
        "started_at",
    )

    def __init__(self) -> None:
        self.messages = 0
        self.failures = 0
        self.busy_seconds = 0.0
        self.last_handler = ""
        self.current = ""  # the endpoint running now ("" when idle)
        self.current_since = 0.0  # on the perf_counter clock
        self.started_at = time.time()
        self.events: collections.deque[tuple[float, str, str, float]] = collections.deque(
            maxlen=FLIGHT_RECORDER
        )

    def begin(self, endpoint: str) -> float:
        """An endpoint starts; returns the clock reading ``end`` needs."""
        self.current = endpoint
        self.current_since = now = time.perf_counter()
        return now

    def end(self, endpoint: str, started: float, failed: bool) -> None:
        """The endpoint ``begin`` announced returned (or raised, when ``failed``)."""
        seconds = time.perf_counter() - started
        self.messages += 1
        self.busy_seconds += seconds
        self.last_handler = endpoint
        self.current = ""
        if failed:
            self.failures += 1
        self.events.append((time.time(), "failed" if failed else "handled", endpoint, seconds))

    def note(self, event: str, detail: str = "") -> None:
        """Record a lifecycle event (started, failed, stopped) with its detail."""
        self.events.append((time.time(), event, detail, 0.0))

    def as_dict(self, *, events: bool) -> dict[str, Any]:
        """The counters (and the recent events) as plain data."""
        data: dict[str, Any] = {
            "messages": self.messages,
            "failures": self.failures,
            "busy_seconds": round(self.busy_seconds, 6),
            "last_handler": self.last_handler,
            "current": self.current,
            "current_for": (
                round(time.perf_counter() - self.current_since, 3) if self.current else 0.0
            ),
            "started_at": self.started_at,
        }
        if events:
            data["events"] = [
                {"at": at, "event": kind, "detail": detail, "seconds": round(seconds, 6)}
                for at, kind, detail, seconds in list(self.events)
            ]
        return data
