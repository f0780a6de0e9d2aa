"""``monarch._rust_bindings.monarch_hyperactor.proc``: proc and uid identifiers.

Exists for Monarch compatibility: Monarch's own examples and tests import ``ProcId``,
``Uid`` through this internal path. The objects are the public ones of
``monarch.actor``; new code should import from there.
"""

from monarch.actor import ProcId, Uid

__all__ = [
    "ProcId",
    "Uid",
]
