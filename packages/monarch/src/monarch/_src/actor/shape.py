"""``monarch._src.actor.shape``: mesh shapes and slices.

Exists for Monarch compatibility: Monarch's own examples and tests import ``Extent``,
``NDSlice``, ``Shape``, ``Slice`` through this internal path. The objects are the public
ones of ``monarch``; new code should import from there.
"""

from monarch import (
    Extent,
    NDSlice,
    Shape,
    Slice,
)

__all__ = [
    "Extent",
    "NDSlice",
    "Shape",
    "Slice",
]
