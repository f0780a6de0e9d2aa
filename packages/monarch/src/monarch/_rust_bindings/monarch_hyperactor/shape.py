"""``monarch._rust_bindings.monarch_hyperactor.shape``: extents, points, shapes and slices.

Exists for Monarch compatibility: Monarch's own examples and tests import ``Extent``,
``Point``, ``Shape``, ``Slice`` through this internal path. The objects are the public
ones of ``monarch``; new code should import from there.
"""

from monarch import (
    Extent,
    Shape,
    Slice,
)
from monarch.actor import Point

__all__ = [
    "Extent",
    "Point",
    "Shape",
    "Slice",
]
