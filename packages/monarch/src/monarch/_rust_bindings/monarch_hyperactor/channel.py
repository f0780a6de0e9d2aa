"""``monarch._rust_bindings.monarch_hyperactor.channel``: transports.

Exists for Monarch compatibility: Monarch's own examples and tests import
``ChannelTransport`` through this internal path. The objects are the public ones of
``monarch.actor``; new code should import from there.
"""

from monarch.actor import (
    ChannelTransport,
)

__all__ = [
    "ChannelTransport",
]
