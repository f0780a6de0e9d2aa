"""``monarch._src.actor.endpoint``: the ``endpoint`` decorator.

Exists for Monarch compatibility: Monarch's own examples and tests import ``Endpoint``,
``endpoint`` through this internal path. The objects are the public ones of
``monarch.actor``; new code should import from there.
"""

from monarch.actor import (
    Endpoint,
    endpoint,
)

__all__ = [
    "Endpoint",
    "endpoint",
]
