"""The supervision tree of one process: who owns each mesh spawned here, the
status of every rank, and where a failure goes.

Every mesh has exactly one owner: the actor that spawned it, or the
process's root client (``ROOT``). A failure of a rank is delivered once, to
the owner. An owning actor's ``__supervise__`` decides: a truthy return
handles it; anything else makes the owner itself fail, and that failure,
carrying the child's as its cause, climbs to the owner's owner. What reaches
the root of the controller goes to ``unhandled_fault_hook``.

The tree is logic only: the runtime tells it what happened and carries out
what it returns, through the ``Routes`` it was given.
"""

from __future__ import annotations

import threading
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

from ._failure import MeshFailure

__all__ = [
    "ROOT",
    "Delivery",
    "OwnershipError",
    "Routes",
    "SupervisionTree",
    "escalation_reason",
    "run_fault_hook",
]

ROOT = ""  # the owner key of a process's root client


class OwnershipError(ValueError):
    """A mesh was given a second owner."""


@dataclass(frozen=True)
class Delivery:
    """``failure`` must be told to ``owner`` (an actor key here, or ``ROOT``)."""

    owner: str
    failure: MeshFailure


class Routes(Protocol):
    """How the runtime carries out the tree's decisions."""

    def to_actor(self, delivery: Delivery) -> bool:
        """Hand the failure to the owning actor's ``__supervise__``; it answers
        later through ``SupervisionTree.supervised``. False if that actor
        cannot take it (it has no ``__supervise__`` or is gone)."""
        ...

    def to_root(self, failure: MeshFailure) -> None:
        """The failure reached this process's root client."""
        ...

    def fail_actor(self, owner: str, reason: str, cause: MeshFailure) -> None:
        """The owning actor did not handle ``cause``: it fails with ``reason``."""
        ...


@dataclass
class _Mesh:
    name: str
    owner: str
    size: int
    failed: dict[int, MeshFailure] = field(default_factory=dict)
    stopped: str | None = None


def escalation_reason(failure: MeshFailure, error: BaseException | None = None) -> str:
    """Why an owner fails when it did not handle its child's ``failure``."""
    if error is not None:
        raised = "".join(traceback.format_exception(error)).rstrip()
        return (
            f"__supervise__ raised while handling a supervision event from its child:\n{raised}\n"
            f"The child's event was: {failure}"
        )
    return (
        "failed because it did not handle a supervision event from its child. "
        f"The child's event was: {failure}"
    )


def run_fault_hook(hook: Callable[[MeshFailure], object], failure: MeshFailure) -> bool:
    """Call the user's hook: returning means handled, raising anything
    (``SystemExit`` included) means not handled."""
    try:
        hook(failure)
    except BaseException:
        return False
    return True


class SupervisionTree:
    """Owners and statuses of the meshes of one process. Thread-safe."""

    def __init__(self, routes: Routes) -> None:
        self.routes = routes
        self._meshes: dict[str, _Mesh] = {}
        self._foreign: set[tuple[str, int]] = set()  # reported failures of meshes not owned here
        self._lock = threading.Lock()

    # -- ownership ----------------------------------------------------------------------

    def adopt(self, mesh: str, owner: str, size: int) -> None:
        """Record that ``owner`` spawned ``mesh`` (of ``size`` ranks)."""
        with self._lock:
            known = self._meshes.get(mesh)
            if known is not None and known.owner != owner:
                raise OwnershipError(
                    f"mesh {mesh} is owned by {known.owner or '<root>'}; "
                    f"{owner or '<root>'} cannot own it too"
                )
            if known is None:
                self._meshes[mesh] = _Mesh(mesh, owner, size)

    def owner_of(self, mesh: str) -> str | None:
        with self._lock:
            known = self._meshes.get(mesh)
            return None if known is None else known.owner

    def owned_by(self, owner: str) -> list[str]:
        """The live meshes ``owner`` spawned, oldest first."""
        with self._lock:
            return [m.name for m in self._meshes.values() if m.owner == owner and not m.stopped]

    def stopped(self, mesh: str, reason: str) -> None:
        """``mesh`` was stopped on purpose: its ranks' exits are no failures."""
        with self._lock:
            known = self._meshes.get(mesh)
            if known is not None and known.stopped is None:
                known.stopped = reason

    # -- status --------------------------------------------------------------------------

    def troubled(self, mesh: str) -> bool:
        """Whether any rank of ``mesh`` failed or it was stopped (a quick test
        for the path of every call: no lock, one lookup)."""
        known = self._meshes.get(mesh)
        return known is not None and (known.stopped is not None or bool(known.failed))

    def dead(self, mesh: str, ranks: Iterable[int]) -> str | None:
        """Why a call to ``ranks`` of ``mesh`` cannot succeed, or None."""
        with self._lock:
            known = self._meshes.get(mesh)
            if known is None:
                return None
            if known.stopped is not None:
                return f"stopped: {known.stopped}"
            for rank in ranks:
                failure = known.failed.get(rank)
                if failure is not None:
                    return f"failed: {failure.reason}"
            return None

    def failed_ranks(self, mesh: str) -> list[int]:
        with self._lock:
            known = self._meshes.get(mesh)
            return sorted(known.failed) if known is not None else []

    # -- failures ------------------------------------------------------------------------

    def record(
        self,
        mesh: str,
        ranks: Iterable[int],
        actor: str,
        reason: str,
        *,
        cause: MeshFailure | None = None,
        owner: str = ROOT,
    ) -> Delivery | None:
        """Note that ``ranks`` of ``mesh`` failed. Returns who must be told,
        or None when nobody must: those ranks were reported already, or the
        mesh was being stopped. ``owner`` is used for meshes spawned elsewhere."""
        ranks = sorted(set(ranks))
        with self._lock:
            known = self._meshes.get(mesh)
            if known is None:
                fresh = [r for r in ranks if (mesh, r) not in self._foreign]
                self._foreign.update((mesh, r) for r in fresh)
                target = owner
            else:
                if known.stopped is not None:
                    return None
                fresh = [r for r in ranks if r not in known.failed]
                target = known.owner
            if not fresh:
                return None
            failure = MeshFailure(mesh, fresh, actor, reason, cause)
            if known is not None:
                for rank in fresh:
                    known.failed[rank] = failure
            return Delivery(target, failure)

    def fail(
        self,
        mesh: str,
        ranks: Iterable[int],
        actor: str,
        reason: str,
        *,
        cause: MeshFailure | None = None,
        owner: str = ROOT,
    ) -> Delivery | None:
        """``record`` the failure and send it on its way."""
        delivery = self.record(mesh, ranks, actor, reason, cause=cause, owner=owner)
        if delivery is not None:
            self.deliver(delivery)
        return delivery

    def deliver(self, delivery: Delivery) -> None:
        if delivery.owner == ROOT:
            self.routes.to_root(delivery.failure)
        elif not self.routes.to_actor(delivery):
            self.supervised(delivery, False)

    def supervised(
        self, delivery: Delivery, outcome: object, error: BaseException | None = None
    ) -> None:
        """The owner's ``__supervise__`` returned ``outcome`` (or raised
        ``error``): a truthy return handles the failure; otherwise the owner fails."""
        if error is None and outcome:
            return
        self.routes.fail_actor(
            delivery.owner, escalation_reason(delivery.failure, error), delivery.failure
        )
