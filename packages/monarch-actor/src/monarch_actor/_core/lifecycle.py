"""Lifecycle events of actors and processes, for supervision to act on.

The runtime reports what happened; it does not decide what follows (that is
the supervision package's job). ``subscribe`` registers a callback for every
event of this process; callbacks run on the thread that saw the event and
must be quick."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from monarch_supervision import (
    ActorFailed,
    ActorStarted,
    ActorStopped,
    HeartbeatMissed,
    LifecycleEvent,
    ProcExited,
)

__all__ = [
    "ActorFailed",
    "ActorStarted",
    "ActorStopped",
    "HeartbeatMissed",
    "LifecycleEvent",
    "ProcExited",
    "emit",
    "subscribe",
    "unsubscribe",
]

log = logging.getLogger("monarch.actor.lifecycle")


_subscribers: list[Callable[[LifecycleEvent], None]] = []
_lock = threading.Lock()


def subscribe(callback: Callable[[LifecycleEvent], None]) -> None:
    """Call ``callback(event)`` for every lifecycle event of this process.

    Args:
        callback: given each ``LifecycleEvent``, on the thread that saw it; it
            must be quick. What it raises is logged and otherwise ignored.
    """
    with _lock:
        _subscribers.append(callback)


def unsubscribe(callback: Callable[[LifecycleEvent], None]) -> None:
    """Stop calling ``callback``; nothing happens if it was not subscribed.

    Args:
        callback: a callback given to ``subscribe``.
    """
    with _lock:
        if callback in _subscribers:
            _subscribers.remove(callback)


def emit(event: LifecycleEvent) -> None:
    with _lock:
        subscribers = list(_subscribers)
    for callback in subscribers:
        try:
            callback(event)
        except Exception:
            log.exception("a lifecycle subscriber raised on %s", event)
