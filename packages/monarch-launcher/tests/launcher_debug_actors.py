"""An actor that stops at ``breakpoint()``, for ``monarch debug``'s tests
(imported by name in the procs)."""

from monarch_actor import Actor, current_rank, endpoint


class Paused(Actor):
    @endpoint
    def work(self, base: int) -> int:
        rank = current_rank().rank
        some_local = base + rank
        breakpoint()
        some_local *= 3
        return some_local  # RETURN_LINE

    @endpoint
    def ping(self) -> str:
        return "pong"


def return_line() -> int:
    """The line of ``Paused.work``'s ``return``."""
    import inspect

    lines, first = inspect.getsourcelines(Paused.work.method)
    return first + next(i for i, text in enumerate(lines) if "RETURN_LINE" in text)
