"""``monarch._src.actor.actor_mesh``: actors, endpoints' adverbs, channels and the message
context.

Exists for Monarch compatibility: Monarch's own examples and tests import these names
through this internal path. The objects are the public ones of ``monarch.actor``; new
code should import from there.
"""

from monarch.actor import (
    Accumulator,
    Actor,
    ActorError,
    Channel,
    Context,
    Endpoint,
    Point,
    Port,
    PortReceiver,
    ValueMesh,
    as_endpoint,
    context,
    current_actor_name,
    current_rank,
    current_size,
    enable_transport,
    send,
    shutdown_context,
)

__all__ = [
    "Accumulator",
    "Actor",
    "ActorError",
    "Channel",
    "Context",
    "Endpoint",
    "Point",
    "Port",
    "PortReceiver",
    "ValueMesh",
    "as_endpoint",
    "context",
    "current_actor_name",
    "current_rank",
    "current_size",
    "enable_transport",
    "send",
    "shutdown_context",
]
