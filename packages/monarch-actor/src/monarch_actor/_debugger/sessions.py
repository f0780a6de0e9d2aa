"""The pdb sessions one debug controller holds, by number and by (actor
name, rank), as its endpoints and its TCP server see them (on the
controller's loop)."""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass, field
from typing import Any

from .commands import CommandError, table

__all__ = ["DebugSessionInfo", "Session", "Sessions", "session_table"]


@dataclass(frozen=True, order=True)
class DebugSessionInfo:
    """One actor stopped in pdb, as ``list`` shows it.

    Attributes:
        actor_name: the name of the actor's mesh (as given to ``spawn``); a
            second session with the same name and rank gets ``#2`` appended.
        rank: the actor's rank in its mesh.
        coords: the actor's coordinates in its mesh, by dimension.
        hostname: the host of the actor's process.
        function: the function it is stopped in (qualified name).
        lineno: the line it is stopped at.
        filename: the file of that function.
        pid: the process id of the actor's process.
        waiting: whether it waits for a pdb command (``False``: it runs, for
            example after ``next``, until pdb stops it again).
    """

    actor_name: str
    rank: int
    coords: dict[str, int] = field(compare=False)
    hostname: str = field(compare=False)
    function: str | None = field(compare=False)
    lineno: int | None = field(compare=False)
    filename: str | None = field(default=None, compare=False)
    pid: int = field(default=0, compare=False)
    waiting: bool = field(default=False, compare=False)


class Session:
    """One pdb session, as the debug controller holds it (on its loop)."""

    def __init__(self, sid: int, name: str, start: dict[str, Any]) -> None:
        self.sid = sid
        self.name = name
        self.rank: int = start["rank"]
        self.coords: dict[str, int] = start["coords"]
        self.hostname: str = start["hostname"]
        self.pid: int = start["pid"]
        self.address: str = start["address"]
        self.function: str | None = start["function"]
        self.filename: str | None = start["filename"]
        self.lineno: int | None = start["lineno"]
        self.output: list[str] = []  # what pdb printed since the last command
        self.lines: asyncio.Queue[str] = asyncio.Queue()
        self.turn = asyncio.Event()  # set: pdb waits for a command, or the session ended
        self.ended: str | None = None
        self.busy = asyncio.Lock()  # one command at a time

    @property
    def label(self) -> str:
        return f"{self.name} {self.rank}"

    def info(self) -> DebugSessionInfo:
        waiting = self.turn.is_set() and self.ended is None
        return DebugSessionInfo(
            self.name,
            self.rank,
            dict(self.coords),
            self.hostname,
            self.function,
            self.lineno,
            self.filename,
            self.pid,
            waiting,
        )

    async def command(self, line: str) -> str:
        """Send one pdb command; what pdb printed until it waits again (or ends)."""
        async with self.busy:
            await self.turn.wait()
            if self.ended is not None:
                return ""
            self.turn.clear()
            self.output = []
            self.lines.put_nowait(line)
            await self.turn.wait()
            return "".join(self.output)


class Sessions:
    """Every open session of one debug controller: by number and by (actor
    name, rank); ``changed`` is notified whenever one starts, waits or ends."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.by_sid: dict[int, Session] = {}
        self.by_key: dict[tuple[str, int], Session] = {}
        self._next_sid = 0
        self.changed = asyncio.Condition()
        self._loop = loop

    def open(self, start: dict[str, Any]) -> Session:
        """Register a session; a second one with the same name and rank gets
        ``#2`` appended to its name."""
        base, rank = str(start["actor_name"]), int(start["rank"])
        name, n = base, 1
        while (name, rank) in self.by_key:
            n += 1
            name = f"{base}#{n}"
        self._next_sid += 1
        session = Session(self._next_sid, name, start)
        self.by_sid[session.sid] = session
        self.by_key[(name, rank)] = session
        return session

    def __len__(self) -> int:
        return len(self.by_sid)

    def get(self, sid: int) -> Session | None:
        return self.by_sid.get(sid)

    def values(self) -> list[Session]:
        return list(self.by_sid.values())

    def infos(self) -> list[DebugSessionInfo]:
        """The sessions as ``list`` gives them, sorted by actor name and rank."""
        return sorted(s.info() for s in self.by_sid.values())

    def end(self, session: Session, output: str, reason: str) -> None:
        session.output.append(output)
        session.ended = reason
        session.turn.set()
        self.by_sid.pop(session.sid, None)
        if self.by_key.get((session.name, session.rank)) is session:
            del self.by_key[(session.name, session.rank)]
        self._loop.create_task(self.notify())

    async def notify(self) -> None:
        async with self.changed:
            self.changed.notify_all()

    def find(self, actor: str, rank: int) -> Session:
        """The session of ``actor`` at ``rank``.

        Raises:
            CommandError: there is none; the text names the ranks or actors that have one.
        """
        session = self.by_key.get((actor, rank))
        if session is not None:
            return session
        ranks = sorted(s.rank for s in self.by_sid.values() if s.name == actor)
        if ranks:
            raise CommandError(
                f"{actor} has no debug session at rank {rank}; its sessions are at ranks "
                f"{', '.join(map(str, ranks))} ('list' shows them)"
            )
        raise CommandError(f"{self.no_actor(actor)} ('list' shows the sessions)")

    def no_actor(self, actor: str) -> str:
        names = sorted({s.name for s in self.by_sid.values()})
        if not names:
            return f"no actor named {actor!r} is stopped at breakpoint(): no actor is"
        return f"no actor named {actor!r} is stopped at breakpoint(); these are: {', '.join(names)}"


def session_table(infos: list[DebugSessionInfo]) -> str:
    rows = [
        (
            i.actor_name,
            i.rank,
            ",".join(f"{k}={v}" for k, v in i.coords.items()) or "-",
            i.hostname,
            i.pid,
            i.function or "?",
            f"{os.path.basename(i.filename or '?')}:{i.lineno}",
            "waiting" if i.waiting else "running",
        )
        for i in infos
    ]
    headers = ("Actor", "Rank", "Coords", "Host", "PID", "Function", "Line", "State")
    return table(headers, rows)
