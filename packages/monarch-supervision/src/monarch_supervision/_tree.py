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
"""The owner key of a process's root client: the owner of meshes spawned outside any actor."""


class OwnershipError(ValueError):
    """A mesh was given a second owner."""


@dataclass(frozen=True)
class Delivery:
    """A failure and the owner that must be told of it.

    Args:
        owner: the key of the owning actor in this process, or ``ROOT``.
        failure: the failure to tell it.

    Attributes:
        owner: the key of the owning actor in this process, or ``ROOT``.
        failure: the failure to tell it.
    """

    owner: str
    failure: MeshFailure


class Routes(Protocol):
    """How the runtime carries out the tree's decisions."""

    def to_actor(self, delivery: Delivery) -> bool:
        """Hand the failure to the owning actor's ``__supervise__``.

        The runtime answers later through ``SupervisionTree.supervised``.

        Args:
            delivery: the failure and the actor that owns the failed mesh.

        Returns:
            False if that actor cannot take it (it has no ``__supervise__`` or is gone);
            the tree then makes the owner fail.
        """
        ...

    def to_root(self, failure: MeshFailure) -> None:
        """The failure reached this process's root client.

        Args:
            failure: the failure, as the root client sees it.
        """
        ...

    def fail_actor(self, owner: str, reason: str, cause: MeshFailure) -> None:
        """The owning actor did not handle ``cause``: it fails with ``reason``.

        Args:
            owner: the key of the actor that must fail.
            reason: why it fails, from ``escalation_reason``.
            cause: the child's failure it did not handle.
        """
        ...


@dataclass
class _Mesh:
    name: str
    owner: str
    size: int
    failed: dict[int, MeshFailure] = field(default_factory=dict)
    stopped: str | None = None


def escalation_reason(failure: MeshFailure, error: BaseException | None = None) -> str:
    """Why an owner fails when it did not handle its child's ``failure``.

    Args:
        failure: the child's failure.
        error: what the owner's ``__supervise__`` raised, if it raised; its traceback
            goes into the reason.

    Returns:
        The reason, in words, ending with the child's failure.
    """
    if error is not None:
        raised = "".join(traceback.format_exception(error)).rstrip()
        return (
            f"__supervise__ raised while handling a supervision event from its child:\n{raised}\n"
            f"The child's event was: {failure}"
        )
    return f"{_UNHANDLED}The child's event was: {failure}"


_UNHANDLED = "failed because it did not handle a supervision event from its child. "


def root_cause(failure: MeshFailure) -> MeshFailure:
    """The failure an escalation started from, as Monarch's callers hear of it.

    Follows ``cause`` while each failure is an owner's that did not handle its
    child's (the owner's ``__supervise__`` returned a falsy value, or there was
    none); stops at a first failure, or at an owner whose ``__supervise__``
    raised (its own error is then the news).

    Args:
        failure: a failure, possibly an escalation of others.

    Returns:
        The failure it escalates, at the bottom of the unhandled chain.
    """
    while failure.cause is not None and failure.reason.startswith(_UNHANDLED):
        failure = failure.cause
    return failure


def run_fault_hook(hook: Callable[[MeshFailure], object], failure: MeshFailure) -> bool:
    """Call the user's fault hook on a failure that reached the root unhandled.

    Args:
        hook: the user's hook, such as ``unhandled_fault_hook``.
        failure: the failure to give it.

    Returns:
        True if the hook returned (the failure is handled); False if it raised anything,
        ``SystemExit`` included.
    """
    try:
        hook(failure)
    except BaseException:
        return False
    return True


class SupervisionTree:
    """Owners and statuses of the meshes of one process. Thread-safe.

    Args:
        routes: how the runtime carries out the tree's decisions.

    Attributes:
        routes: how the runtime carries out the tree's decisions.
    """

    def __init__(self, routes: Routes) -> None:
        self.routes = routes
        self._meshes: dict[str, _Mesh] = {}
        self._foreign: set[tuple[str, int]] = set()  # reported failures of meshes not owned here
        self._lock = threading.Lock()

    # -- ownership ----------------------------------------------------------------------

    def adopt(self, mesh: str, owner: str, size: int) -> None:
        """Record that ``owner`` spawned ``mesh``.

        Adopting it again with the same owner does nothing.

        Args:
            mesh: the key of the mesh.
            owner: the key of the actor that spawned it, or ``ROOT``.
            size: how many ranks the mesh has.

        Raises:
            OwnershipError: ``mesh`` already has another owner.
        """
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
        """The owner of ``mesh``, or None if it was not adopted here.

        Args:
            mesh: the key of the mesh.
        """
        with self._lock:
            known = self._meshes.get(mesh)
            return None if known is None else known.owner

    def owned_by(self, owner: str) -> list[str]:
        """The meshes ``owner`` spawned that were not stopped, oldest first.

        Args:
            owner: an actor key, or ``ROOT``.
        """
        with self._lock:
            return [m.name for m in self._meshes.values() if m.owner == owner and not m.stopped]

    def stopped(self, mesh: str, reason: str) -> None:
        """Note that ``mesh`` was stopped on purpose: its ranks' exits are no failures.

        Only the first reason is kept; a mesh not adopted here is ignored.

        Args:
            mesh: the key of the mesh.
            reason: why it was stopped, given to later calls to it.
        """
        with self._lock:
            known = self._meshes.get(mesh)
            if known is not None and known.stopped is None:
                known.stopped = reason

    # -- status --------------------------------------------------------------------------

    def troubled(self, mesh: str) -> bool:
        """Whether any rank of ``mesh`` failed or it was stopped.

        A quick test for the path of every call (no lock, one lookup); ``dead`` tells
        more.

        Args:
            mesh: the key of the mesh.
        """
        known = self._meshes.get(mesh)
        return known is not None and (known.stopped is not None or bool(known.failed))

    def dead(self, mesh: str, ranks: Iterable[int]) -> str | None:
        """Why a call to ``ranks`` of ``mesh`` cannot succeed, or None.

        Args:
            mesh: the key of the mesh.
            ranks: the ranks the call goes to.

        Returns:
            ``"stopped: <reason>"`` or ``"failed: <reason>"``; None if those ranks are
            alive or the mesh was not adopted here.
        """
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

    def stop_reason(self, mesh: str) -> str | None:
        """Why ``mesh`` was stopped, or None if it was not (or was not adopted here).

        Args:
            mesh: the key of the mesh.
        """
        with self._lock:
            known = self._meshes.get(mesh)
            return None if known is None else known.stopped

    def first_failure(self, mesh: str, ranks: Iterable[int]) -> MeshFailure | None:
        """The failure of the first of ``ranks`` of ``mesh`` that failed, or None.

        Args:
            mesh: the key of the mesh.
            ranks: the ranks to look at, in order.
        """
        with self._lock:
            known = self._meshes.get(mesh)
            if known is None:
                return None
            for rank in ranks:
                failure = known.failed.get(rank)
                if failure is not None:
                    return failure
            return None

    def failed_ranks(self, mesh: str) -> list[int]:
        """The ranks of ``mesh`` that failed, sorted (empty for a mesh not adopted here).

        Args:
            mesh: the key of the mesh.
        """
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
        """Note that ``ranks`` of ``mesh`` failed, without telling anyone yet.

        Each rank's failure is recorded once: ranks reported already are left out of
        the new failure.

        Args:
            mesh: the key of the mesh.
            ranks: the ranks that failed.
            actor: the display name of the actor that failed.
            reason: why it failed, in words.
            cause: the child's failure, when this failure escalates one.
            owner: who must be told, for a mesh not adopted here (spawned in another
                process); ignored for meshes adopted here.

        Returns:
            Who must be told of which failure, or None when nobody must: those ranks
            were reported already, or the mesh was stopped.
        """
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
        """``record`` the failure, then ``deliver`` it.

        Args:
            mesh: the key of the mesh.
            ranks: the ranks that failed.
            actor: the display name of the actor that failed.
            reason: why it failed, in words.
            cause: the child's failure, when this failure escalates one.
            owner: who must be told, for a mesh not adopted here.

        Returns:
            The delivery made, or None when nobody had to be told (see ``record``).
        """
        delivery = self.record(mesh, ranks, actor, reason, cause=cause, owner=owner)
        if delivery is not None:
            self.deliver(delivery)
        return delivery

    def deliver(self, delivery: Delivery) -> None:
        """Send a failure to its owner: the root client, or the owning actor.

        If the owning actor cannot take it, the owner fails at once, as if its
        ``__supervise__`` had not handled it.

        Args:
            delivery: the failure and who must be told, from ``record``.
        """
        if delivery.owner == ROOT:
            self.routes.to_root(delivery.failure)
        elif not self.routes.to_actor(delivery):
            self.supervised(delivery, False)

    def supervised(
        self, delivery: Delivery, outcome: object, error: BaseException | None = None
    ) -> None:
        """Act on the answer of the owner's ``__supervise__``.

        A truthy ``outcome`` handles the failure; otherwise (or if it raised) the owner
        fails through ``Routes.fail_actor``, with the child's failure as the cause.

        Args:
            delivery: the delivery the owner was given.
            outcome: what ``__supervise__`` returned.
            error: what it raised instead, if it raised.
        """
        if error is None and outcome:
            return
        self.routes.fail_actor(
            delivery.owner, escalation_reason(delivery.failure, error), delivery.failure
        )
