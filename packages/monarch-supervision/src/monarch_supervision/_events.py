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
    """An actor of a mesh started on one rank.

    Args:
        actor: the actor's display name, ``<owner>.<Class name{rank}>``.
        mesh: the key of the actor mesh.
        rank: the actor's rank in that mesh.

    Attributes:
        actor: the actor's display name, ``<owner>.<Class name{rank}>``.
        mesh: the key of the actor mesh.
        rank: the actor's rank in that mesh.
    """

    actor: str  # the actor's display name: <owner>.<Class name{rank}>
    mesh: str  # the actor mesh's key
    rank: int


@dataclass(frozen=True)
class ActorFailed:
    """An actor failed; its owner is told next.

    For example, its ``__init__`` raised, or it did not handle a failure of a mesh it owns.

    Args:
        actor: the actor's display name, ``<owner>.<Class name{rank}>``.
        mesh: the key of the actor mesh.
        rank: the actor's rank in that mesh.
        reason: why it failed, in words.

    Attributes:
        actor: the actor's display name, ``<owner>.<Class name{rank}>``.
        mesh: the key of the actor mesh.
        rank: the actor's rank in that mesh.
        reason: why it failed, in words.
    """

    actor: str
    mesh: str
    rank: int
    reason: str


@dataclass(frozen=True)
class ActorStopped:
    """An actor stopped on request, not by failing.

    Args:
        actor: the actor's display name, ``<owner>.<Class name{rank}>``.
        mesh: the key of the actor mesh.
        rank: the actor's rank in that mesh.
        reason: the reason given with the stop request.

    Attributes:
        actor: the actor's display name, ``<owner>.<Class name{rank}>``.
        mesh: the key of the actor mesh.
        rank: the actor's rank in that mesh.
        reason: the reason given with the stop request.
    """

    actor: str
    mesh: str
    rank: int
    reason: str


@dataclass(frozen=True)
class ProcExited:
    """A process of a proc mesh exited, or was lost with its host.

    Args:
        proc_mesh: the id of the proc mesh.
        rank: the process's rank in that proc mesh.
        exit_code: its exit status: negative when killed by that signal, ``-1`` also when
            it was lost with its host.
        expected: True when it was stopped on request, False when it crashed.

    Attributes:
        proc_mesh: the id of the proc mesh.
        rank: the process's rank in that proc mesh.
        exit_code: its exit status: negative when killed by that signal, ``-1`` also when
            it was lost with its host.
        expected: True when it was stopped on request, False when it crashed.
    """

    proc_mesh: str
    rank: int
    exit_code: int
    expected: bool  # stopped on request, rather than crashed


@dataclass(frozen=True)
class HeartbeatMissed:
    """A process sent no heartbeat within the deadline; it is declared dead and killed.

    Args:
        proc_mesh: the id of the proc mesh.
        rank: the process's rank in that proc mesh.
        silent_for: seconds since its last sign of life.

    Attributes:
        proc_mesh: the id of the proc mesh.
        rank: the process's rank in that proc mesh.
        silent_for: seconds since its last sign of life.
    """

    proc_mesh: str
    rank: int
    silent_for: float  # seconds since the last sign of life


LifecycleEvent = ActorStarted | ActorFailed | ActorStopped | ProcExited | HeartbeatMissed
"""Any of the lifecycle events: the type a ``subscribe`` callback receives."""
