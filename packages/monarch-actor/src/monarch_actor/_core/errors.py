"""What can go wrong in the actor runtime, as the caller sees it (defined by
the supervision package, which owns the failure model)."""

from __future__ import annotations

from monarch_supervision import ActorError, MonarchError, SupervisionError

__all__ = ["ActorError", "MonarchError", "SupervisionError"]
