"""``monarch._src.actor.proc_mesh``: process meshes and named controllers.

Exists for Monarch compatibility: Monarch's own examples and tests import ``ProcMesh``,
``get_or_spawn_controller`` through this internal path. The objects are the public ones
of ``monarch.actor``; new code should import from there.
"""

from monarch.actor import (
    ProcMesh,
    get_or_spawn_controller,
)

__all__ = [
    "ProcMesh",
    "get_or_spawn_controller",
]
