"""``monarch._rust_bindings.monarch_hyperactor.selection``: selections of mesh points.

Exists for Monarch compatibility: Monarch's own examples and tests import ``Selection``
through this internal path. The objects are the public ones of ``monarch``; new code
should import from there.
"""

from monarch import (
    Selection,
)

__all__ = [
    "Selection",
]
