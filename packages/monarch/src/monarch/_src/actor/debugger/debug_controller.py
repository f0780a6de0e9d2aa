"""``monarch._src.actor.debugger.debug_controller``: the debugging controller.

Exists for Monarch compatibility: Monarch's own examples and tests import
``debug_controller`` through this internal path. The objects are the public ones of
``monarch.actor``; new code should import from there.
"""

from monarch.actor import (
    debug_controller,
)

__all__ = [
    "debug_controller",
]
