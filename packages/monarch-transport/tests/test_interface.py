"""The defaults the interface gives a backend that implements only the
abstract methods."""

import asyncio

from monarch_transport import Listener, ListenerClosed, Peer, Received
from monarch_transport.testing import until


class QueueListener(Listener):
    """A backend's listener reduced to ``receive`` over an asyncio queue."""

    def __init__(self) -> None:
        self.events: asyncio.Queue[Received | None] = asyncio.Queue()

    async def receive(self) -> Received:
        event = await self.events.get()
        if event is None:
            raise ListenerClosed("closed")
        return event

    async def aclose(self) -> None:
        self.events.put_nowait(None)


def test_the_default_deliver_to_works_before_the_loop_runs():
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)  # as a process does before it serves
    try:
        listener = QueueListener()
        event = Received(Peer(1, "p"), [memoryview(b"x")])
        listener.events.put_nowait(event)
        handled: list[Received] = []
        listener.deliver_to(handled.append)  # not running yet

        async def drain() -> None:
            assert await until(lambda: handled)  # the waiting event went to the handler
            await listener.aclose()

        loop.run_until_complete(drain())
        assert handled == [event]
    finally:
        asyncio.set_event_loop(None)
        loop.close()
