"""Mesh algebra for Monarch in Python.

Pure Python, no I/O: the names and shapes of meshes (``Extent``, ``Point``,
``Shape``), the strided rank sets behind them (``Slice``), selections of
ranks (``Selection``) and the trees broadcasts travel down
(``RoutingTree``). The Python surface matches Monarch's ndslice types.
"""

from ._errors import (
    DimensionNotFoundError,
    MeshError,
    MeshIndexError,
    RankNotFoundError,
    SelectionSyntaxError,
    SliceError,
)
from ._routing import Branch, RoutingTree, host_children
from ._selection import Selection
from ._shape import Extent, Point, Shape
from ._slice import Slice

NDSlice = Slice  # Monarch's other name for it
"""Monarch's other name for ``Slice``: the same class."""

__all__ = [
    "Branch",
    "DimensionNotFoundError",
    "Extent",
    "MeshError",
    "MeshIndexError",
    "NDSlice",
    "Point",
    "RankNotFoundError",
    "RoutingTree",
    "host_children",
    "Selection",
    "SelectionSyntaxError",
    "Shape",
    "Slice",
    "SliceError",
]

__version__ = "0.1.0"

# Report public classes as ``monarch_mesh.X`` (tracebacks, reprs), not by the
# private module that defines them.
for _name in __all__:
    if _name != "NDSlice":
        globals()[_name].__module__ = __name__
del _name
