"""Actors that stop at ``breakpoint()``, for the debugger's tests (imported by
name: the procs see the tests' ``sys.path``)."""

import asyncio

from monarch_actor import Actor, current_rank, endpoint


class Debugee(Actor):
    @endpoint
    def to_debug(self, base: int) -> int:
        rank = current_rank().rank
        some_local = base + rank * 10
        breakpoint()
        doubled = some_local * 2
        return doubled + 1

    @endpoint
    def loop(self, n: int) -> int:
        total = 0
        breakpoint()
        for i in range(n):
            total += i  # LOOP_BODY
        return total

    @endpoint
    def ping(self) -> str:
        return "pong"


class AsyncDebugee(Actor):
    @endpoint
    async def to_debug(self, base: int) -> int:
        value = base + 1
        breakpoint()
        await asyncio.sleep(0)
        value += 1
        return value

    @endpoint
    async def ping(self) -> str:
        return "pong"


def loop_body_line() -> int:
    """The line of ``Debugee.loop``'s body, where a test sets a pdb breakpoint."""
    import inspect

    lines, first = inspect.getsourcelines(Debugee.loop.method)
    return first + next(i for i, text in enumerate(lines) if "LOOP_BODY" in text)
