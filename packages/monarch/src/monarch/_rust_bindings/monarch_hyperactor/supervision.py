"""``monarch._rust_bindings.monarch_hyperactor.supervision``: failures of meshes.

Exists for Monarch compatibility: Monarch's own examples and tests import
``MeshFailure``, ``SupervisionError`` through this internal path. The objects are the
public ones of ``monarch.actor``; new code should import from there.
"""

from monarch.actor import (
    MeshFailure,
    SupervisionError,
)

__all__ = [
    "MeshFailure",
    "SupervisionError",
]
