"""What supervision needs of the meshes it records: the user API's
``ActorMesh`` and ``ProcMesh`` (a layer above this one), named here by
their shape only, so that no import, not even a type-only one, goes up."""

from __future__ import annotations

from typing import Protocol

from monarch_mesh import Shape

from .._core.future import Future
from .._procs.table import ProcTable

__all__ = ["OwnedActors", "OwnedProcs"]


class OwnedProcs(Protocol):
    """A proc mesh (``ProcMesh``): its processes' table and its shape over it."""

    @property
    def _table(self) -> ProcTable: ...

    @property
    def _shape(self) -> Shape: ...

    def stop(self, reason: str = ...) -> Future[None]:
        """Stop its processes and the actors on them."""
        ...


class OwnedActors(Protocol):
    """An actor mesh (``ActorMesh``): its key and the proc mesh it was spawned on."""

    @property
    def _key(self) -> str: ...

    @property
    def _procs(self) -> OwnedProcs: ...

    def stop(self, reason: str = ...) -> Future[None]:
        """Stop its actors."""
        ...
