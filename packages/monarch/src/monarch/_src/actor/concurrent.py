"""``monarch._src.actor.concurrent``: the ``concurrent_endpoint`` decorator.

Exists for Monarch compatibility: Monarch's own examples and tests import
``concurrent_endpoint`` through this internal path. The objects are the public ones of
``monarch.actor``; new code should import from there.
"""

from monarch.actor import (
    concurrent_endpoint,
)

__all__ = [
    "concurrent_endpoint",
]
