"""``monarch._src.actor.supervision``: the controller's ``unhandled_fault_hook``.

Exists for Monarch compatibility: Monarch's own examples and tests import
``unhandled_fault_hook`` through this internal path. The objects are the public ones of
``monarch.actor``; new code should import from there.
"""

from monarch.actor import (
    unhandled_fault_hook,
)

__all__ = [
    "unhandled_fault_hook",
]
