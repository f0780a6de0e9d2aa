"""What code is running now: the actor whose message this thread (or task)
handles, if any. The user-facing ``context()`` reads it; supervision asks it
who owns what is being spawned."""

from __future__ import annotations

import contextvars
from typing import Any, Protocol

__all__ = ["Running", "current", "reset_current", "set_current"]


class Running(Protocol):
    """What the layers below the API need of the running context."""

    @property
    def actor_key(self) -> str | None:
        """The key of the running actor (``None`` for the root client)."""


_current: contextvars.ContextVar[Any] = contextvars.ContextVar("monarch_context", default=None)


def set_current(ctx: Any) -> contextvars.Token[Any]:
    return _current.set(ctx)


def reset_current(token: contextvars.Token[Any]) -> None:
    _current.reset(token)


def current() -> Any:
    """The running context (``monarch_actor.Context``), or ``None`` outside any actor."""
    return _current.get()
