"""The words of supervision errors, in one place.

Monarch 0.7.0's wording comes first, so that what matches Monarch's messages
matches ours; what we know beyond it (which process, its pid and host, hints)
follows in the reason.
"""

from __future__ import annotations

import textwrap

__all__ = ["PROC_MESH_STOPPED", "actor_failed", "actor_stopped", "call_failed"]

PROC_MESH_STOPPED = "actor mesh is stopped due to proc mesh shutdown"
"""Why calls to an actor mesh fail after its proc mesh was stopped."""


def call_failed(mesh: str, method: str, why: str) -> str:
    """``Endpoint call {mesh}.{method}() failed, {why}``."""
    return f"Endpoint call {mesh}.{method}() failed, {why}"


def actor_failed(actor: str, reason: str) -> str:
    """The actor failed (as ``MeshFailure.report()`` says it)."""
    return f"The actor {actor} and all its descendants have failed:\n" + textwrap.indent(
        reason, "  "
    )


def actor_stopped(actor: str, reason: str) -> str:
    """The actor was stopped on purpose."""
    return f"Supervision event: actor {actor} has status:\n  stopped: {reason}"
