"""``monarch._rust_bindings.monarch_hyperactor.value_mesh``: meshes of values.

Exists for Monarch compatibility: Monarch's own examples and tests import ``ValueMesh``
through this internal path. The objects are the public ones of ``monarch.actor``; new
code should import from there.
"""

from monarch.actor import (
    ValueMesh,
)

__all__ = [
    "ValueMesh",
]
