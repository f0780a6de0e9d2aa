"""``monarch._src.actor.future``: Monarch's ``Future``.

Exists for Monarch compatibility: Monarch's own examples and tests import ``Future``
through this internal path. The objects are the public ones of ``monarch.actor``; new
code should import from there.
"""

from monarch.actor import (
    Future,
)

__all__ = [
    "Future",
]
