"""What can go wrong, as the caller of an endpoint sees it."""

from __future__ import annotations

__all__ = ["ActorError", "MonarchError", "SupervisionError"]


class MonarchError(Exception):
    """Base of the runtime's own errors (not of errors raised by user code)."""


class ActorError(Exception):
    """An endpoint raised an exception; the caller gets this error in its place.

    ``str()`` gives ``message`` followed by the remote traceback. It pickles with all
    three fields, so it can travel back to the caller's process.

    Args:
        exception: the exception the endpoint raised.
        message: names the actor and the endpoint that raised.
        exception_formatted: the traceback, formatted where the endpoint ran.

    Attributes:
        exception: the exception the endpoint raised.
        message: names the actor and the endpoint that raised.
        exception_formatted: the traceback, formatted where the endpoint ran.
    """

    def __init__(self, exception: BaseException, message: str, exception_formatted: str) -> None:
        super().__init__(exception, message)
        self.exception = exception
        self.message = message
        self.exception_formatted = exception_formatted

    def __str__(self) -> str:
        return f"{self.message}\n {self.exception_formatted}"

    def __repr__(self) -> str:
        return f"ActorError({self.exception!r}, {self.message!r})"

    def __reduce__(self) -> tuple[object, ...]:
        return (ActorError, (self.exception, self.message, self.exception_formatted))


class SupervisionError(RuntimeError):
    """The target of a call failed, stopped or vanished before it answered."""
