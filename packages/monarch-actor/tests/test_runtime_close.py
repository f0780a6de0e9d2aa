"""A stopping process hangs up all its connections at once: peers that do
not answer (stopped, cut off) cost it one wait, not one each."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from monarch_actor._core.router import Outbox, Runtime


class SlowToHangUp:
    """A connection whose peer answers its goodbye only once every other
    connection has started saying goodbye too."""

    def __init__(self, events: list[str], everyone: asyncio.Event, count: int) -> None:
        self.events, self.everyone, self.count = events, everyone, count

    async def aclose(self) -> None:
        self.events.append("hang up")
        if self.events.count("hang up") == self.count:
            self.everyone.set()
        await self.everyone.wait()  # hung up one at a time, this waits out its time
        self.events.append("done")


def test_a_stopping_runtime_hangs_up_every_connection_at_once() -> None:
    loop = asyncio.new_event_loop()
    try:
        listener = SimpleNamespace(address="ipc:///nowhere", aclose=lambda: asyncio.sleep(0))
        runtime = Runtime(loop, listener, "controller")  # type: ignore[arg-type]
        events: list[str] = []
        everyone = asyncio.Event()
        for i in range(3):
            outbox = runtime.outboxes[f"ipc:///peer{i}"] = Outbox(runtime, f"ipc:///peer{i}")
            outbox.sender = SlowToHangUp(events, everyone, 3)  # type: ignore[assignment]
        loop.run_until_complete(runtime.close())
        assert events == ["hang up"] * 3 + ["done"] * 3
    finally:
        loop.close()
