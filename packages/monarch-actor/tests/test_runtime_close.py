"""A stopping process hangs up all its connections at once: peers that do
not answer (stopped, cut off) cost it one wait, not one each."""

from __future__ import annotations

import asyncio

from monarch_actor._core.router import Outbox, Runtime
from monarch_actor._procs.remote import RemoteAgent


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


def test_a_stopping_runtime_hangs_up_every_connection_at_once(bare_runtime: Runtime) -> None:
    events: list[str] = []
    everyone = asyncio.Event()
    for i in range(3):
        outbox = bare_runtime.outboxes[f"ipc:///peer{i}"] = Outbox(bare_runtime, f"ipc:///peer{i}")
        outbox.sender = SlowToHangUp(events, everyone, 3)  # type: ignore[assignment]
    bare_runtime.loop.run_until_complete(bare_runtime.close())
    assert events == ["hang up"] * 3 + ["done"] * 3


class NeverAnswers:
    """A connection to a peer that never answers a goodbye (a host that was
    stopped, then declared lost)."""

    def __init__(self, events: list[str]) -> None:
        self.events = events

    async def aclose(self) -> None:
        self.events.append("goodbye")
        await asyncio.Event().wait()

    async def abort(self, reason: str) -> None:
        self.events.append(f"cut: {reason}")


def test_a_stopping_runtime_cuts_connections_to_peers_declared_lost(bare_runtime: Runtime) -> None:
    events: list[str] = []
    outbox = bare_runtime.outboxes["tcp://10.0.0.2:7000"] = Outbox(
        bare_runtime, "tcp://10.0.0.2:7000"
    )
    outbox.sender = NeverAnswers(events)  # type: ignore[assignment]
    bare_runtime.silent.add("tcp://10.0.0.2:7000")
    bare_runtime.loop.run_until_complete(asyncio.wait_for(bare_runtime.close(), 1.0))
    assert len(events) == 1 and events[0].startswith("cut: ")


def test_a_peer_declared_gone_has_its_connection_cut_at_once(bare_runtime: Runtime) -> None:
    events: list[str] = []
    outbox = bare_runtime.outboxes["ipc:///proc"] = Outbox(bare_runtime, "ipc:///proc")
    outbox.sender = NeverAnswers(events)  # type: ignore[assignment]
    bare_runtime.peer_gone("ipc:///proc", "its host was lost")
    bare_runtime.loop.run_until_complete(asyncio.sleep(0))
    assert events == ["cut: its host was lost"]
    assert outbox.failure == "its host was lost"


def test_a_host_declared_lost_is_cut_when_the_runtime_stops(bare_runtime: Runtime) -> None:
    exits: list[tuple[object, int, int | None, str]] = []
    host = RemoteAgent(bare_runtime, "tcp://10.0.0.3:7000", lambda *exit: exits.append(exit))
    host.requests[0] = ("table", 2)
    host.ready.set_result({})
    host.host_lost("silent for 5.0 s")
    assert exits == [("table", 2, None, host.lost)]
    assert "tcp://10.0.0.3:7000" in bare_runtime.silent
