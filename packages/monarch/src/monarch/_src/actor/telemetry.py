"""``monarch._src.actor.telemetry``: spans and meters.

Exists for Monarch compatibility: Monarch's own examples and tests import ``get_meter``,
``span``, ``traced`` through this internal path. The objects are the public ones of
``monarch.actor``; new code should import from there.
"""

from monarch.actor import (
    get_meter,
    span,
    traced,
)

__all__ = [
    "get_meter",
    "span",
    "traced",
]
