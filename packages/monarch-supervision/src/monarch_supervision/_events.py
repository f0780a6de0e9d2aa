"""Lifecycle events a runtime reports, for supervision (and anyone
subscribed) to act on. The runtime says what happened; the tree decides who
is told."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "ActorFailed",
    "ActorStarted",
    "ActorStopped",
    "HeartbeatMissed",
    "LifecycleEvent",
    "ProcExited",
]


@dataclass(frozen=True)
class ActorStarted:
    actor: str  # the actor's display name: <owner>.<Class name{rank}>
    mesh: str  # the actor mesh's key
    rank: int


@dataclass(frozen=True)
class ActorFailed:
    actor: str
    mesh: str
    rank: int
    reason: str


@dataclass(frozen=True)
class ActorStopped:
    actor: str
    mesh: str
    rank: int
    reason: str


@dataclass(frozen=True)
class ProcExited:
    proc_mesh: str
    rank: int
    exit_code: int
    expected: bool  # stopped on request, rather than crashed


@dataclass(frozen=True)
class HeartbeatMissed:
    proc_mesh: str
    rank: int
    silent_for: float  # seconds since the last sign of life


LifecycleEvent = ActorStarted | ActorFailed | ActorStopped | ProcExited | HeartbeatMissed
