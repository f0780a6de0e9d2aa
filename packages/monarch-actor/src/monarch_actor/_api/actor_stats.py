"""What an actor has been doing, kept cheaply for the mesh admin: counters,
the handler running now, and a small flight recorder of recent events."""

from __future__ import annotations

import collections
import time
import traceback
from typing import Any, Final

__all__ = ["FLIGHT_RECORDER", "ActorStats"]

FLIGHT_RECORDER: Final = 64  # recent events kept per actor
ERROR_TEXT: Final = 8000  # characters of a handler's exception kept (its end: the error)


class ActorStats:
    """Counters and recent events of one actor (written by its own thread only)."""

    __slots__ = (
        "busy_seconds",
        "current",
        "current_since",
        "error_note",
        "events",
        "failures",
        "last_error",
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
        self.last_error: tuple[float, str, str] | None = None  # (at, endpoint, traceback)
        self.error_note = ""  # the error of the handler ending now, for its event
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
        detail = endpoint
        if failed:
            self.failures += 1
            if self.error_note:
                detail, self.error_note = f"{endpoint}: {self.error_note}", ""
        self.events.append((time.time(), "failed" if failed else "handled", detail, seconds))

    def raised(self, endpoint: str, error: BaseException) -> None:
        """The endpoint raised ``error`` (before ``end``): kept as the actor's
        last error, its traceback included, for the admin to show."""
        text = "".join(traceback.format_exception(error))
        self.last_error = (time.time(), endpoint, text[-ERROR_TEXT:])
        lines = traceback.format_exception_only(error)
        self.error_note = lines[-1].strip() if lines else type(error).__name__

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
            "last_error": (
                None
                if self.last_error is None
                else dict(zip(("at", "handler", "error"), self.last_error, strict=True))
            ),
        }
        if events:
            data["events"] = [
                {"at": at, "event": kind, "detail": detail, "seconds": round(seconds, 6)}
                for at, kind, detail, seconds in list(self.events)
            ]
        return data
