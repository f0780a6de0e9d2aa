"""Runtime settings read from the environment (Monarch's names where it has one)."""

from __future__ import annotations

import os

from monarch_supervision import DEFAULT_HEARTBEAT_DEADLINE

__all__ = [
    "attach_timeout",
    "cast_fanout",
    "cleanup_timeout",
    "order_gap_wait",
    "heartbeat_deadline",
    "host_deadline",
]


def _int(names: tuple[str, ...], default: int, low: int) -> int:
    for name in names:
        text = os.environ.get(name)
        if text is None:
            continue
        try:
            value = int(text)
        except ValueError:
            raise ValueError(f"{name} must be an integer, got {text!r}") from None
        if value < low:
            raise ValueError(f"{name} must be at least {low}, got {value}")
        return value
    return default


def cast_fanout() -> int:
    """Children per node of a broadcast's multicast tree."""
    return _int(("MONARCH_CAST_FANOUT", "HYPERACTOR_MESH_MAX_CAST_FANOUT"), 16, 1)


def _seconds(name: str, default: float) -> float:
    text = os.environ.get(name)
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{name} must be a number of seconds, got {text!r}") from None
    if not value > 0:
        raise ValueError(f"{name} must be positive, got {value}")
    return value


def heartbeat_deadline() -> float:
    """Seconds a process may stay silent before its owner counts it dead."""
    return _seconds("MONARCH_HEARTBEAT_DEADLINE", DEFAULT_HEARTBEAT_DEADLINE)


def host_deadline() -> float:
    """Seconds a worker may stay silent before its host counts as lost."""
    return _seconds("MONARCH_HOST_DEADLINE", 5.0)


def attach_timeout() -> float:
    """Seconds ``attach_to_workers`` keeps trying a worker that is not up yet."""
    return _seconds("MONARCH_ATTACH_TIMEOUT", 60.0)


def cleanup_timeout() -> float:
    """Seconds an actor's ``__cleanup__`` (and stopping the meshes it owns) may take."""
    return _seconds("MONARCH_CLEANUP_TIMEOUT", 5.0)


def order_gap_wait() -> float:
    """Seconds a missing message may hold up later ones from the same sender
    to the same actor (only a message lost with a process that forwarded it
    goes missing)."""
    return _seconds("MONARCH_ORDER_GAP_WAIT", 30.0)
