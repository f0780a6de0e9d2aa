"""``MeshFailure``: which mesh failed, at which ranks, in which actor, why,
and what caused it (a failure its owner did not handle has its child's
failure as ``cause``)."""

from __future__ import annotations

import textwrap

__all__ = ["ROOT_MESH", "MeshFailure"]

ROOT_MESH = "<none>"  # the mesh name of a failure of the root client itself
"""The ``mesh_name`` of a failure of a process's root client itself, which is in no mesh."""


class MeshFailure:
    """A supervision event as the owner of the failed mesh sees it.

    ``report()`` is the text for people; ``str()`` is Monarch's one-record form.
    Failures compare equal, and hash alike, when all five fields are equal, and they
    pickle, so they can be sent to the owner's process.

    Args:
        mesh_name: the key of the mesh that failed.
        crashed_ranks: the ranks of that mesh that failed (copied).
        actor: the display name of the actor that failed.
        reason: why it failed, in words.
        cause: the child's failure, when this one comes from an owner that did not
            handle it; None for a first failure.

    Attributes:
        mesh_name: the key of the mesh that failed.
        crashed_ranks: the ranks of that mesh that failed.
        actor: the display name of the actor that failed.
        reason: why it failed, in words.
        cause: the child's failure this one escalates, or None.
    """

    def __init__(
        self,
        mesh_name: str,
        crashed_ranks: list[int],
        actor: str,
        reason: str,
        cause: MeshFailure | None = None,
    ) -> None:
        self.mesh_name = mesh_name
        self.crashed_ranks = list(crashed_ranks)
        self.actor = actor
        self.reason = reason
        self.cause = cause

    @property
    def mesh(self) -> tuple[()]:
        """Always an empty tuple, as in Monarch 0.7.0; use ``mesh_name`` instead."""
        return ()  # as in Monarch 0.7.0: use mesh_name

    @property
    def chain(self) -> list[MeshFailure]:
        """This failure, then its cause, then that one's cause, to the first."""
        chain: list[MeshFailure] = []
        failure: MeshFailure | None = self
        while failure is not None:
            chain.append(failure)
            failure = failure.cause
        return chain

    def report(self) -> str:
        """The failure as text for people, as Monarch writes it: the actor that
        failed first (the last of ``chain``: an owner that did not handle its
        child's failure escalates it, and the child's is what went wrong),
        then its reason, indented. ``str()`` has the whole chain."""
        first = self.chain[-1]
        return f"The actor {first.actor} and all its descendants have failed:\n" + textwrap.indent(
            first.reason, "  "
        )

    def __str__(self) -> str:
        return (
            f"MeshFailure(mesh_name={self.mesh_name}, crashed_ranks={self.crashed_ranks}, "
            f"event=Supervision event: actor {self.actor} failed:\n"
            + textwrap.indent(self.reason, "  ")
            + ")"
        )

    __repr__ = __str__

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MeshFailure):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def _key(self) -> tuple[object, ...]:
        return (self.mesh_name, tuple(self.crashed_ranks), self.actor, self.reason, self.cause)

    def __reduce__(self) -> tuple[object, ...]:
        return (
            MeshFailure,
            (self.mesh_name, self.crashed_ranks, self.actor, self.reason, self.cause),
        )
