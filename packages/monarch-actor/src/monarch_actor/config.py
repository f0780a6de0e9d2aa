"""Switches of the actor runtime that user code flips as module attributes,
as in Monarch (``monarch.actor.config`` is this module).

The runtime reads each attribute when it needs it, so a change takes effect
at once in the process that makes it; set it in an actor's endpoint (or a
proc's bootstrap) to change it in that proc.

Examples:
    >>> from monarch_actor import config
    >>> config.prefix_python_logs_with_actor
    True
    >>> config.prefix_python_logs_with_actor = False  # records keep their own text
    >>> config.prefix_python_logs_with_actor = True
"""

from __future__ import annotations

__all__ = ["prefix_python_logs_with_actor"]

prefix_python_logs_with_actor: bool = True
"""Whether a Python ``logging`` record emitted inside an actor (on its thread
or its event loop) gets the prefix ``[actor=<the actor>] `` before its
message. Read when each record is emitted; records emitted outside actors
are never changed."""
