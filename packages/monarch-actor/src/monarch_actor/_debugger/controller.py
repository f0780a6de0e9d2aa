"""``breakpoint()`` inside actors, served to ``monarch debug``.

Every process's runtime installs a ``sys.breakpointhook``. In code an actor
runs (an endpoint, ``__init__``, ``__supervise__``), ``breakpoint()`` opens a
pdb session whose input and output travel, as endpoint calls, to the job's
debug controller: one actor in the controller's process. Only the thread that
called ``breakpoint()`` waits in pdb; other actors, other processes and the
controller go on. Elsewhere (the script itself) ``breakpoint()`` does what it
did before.

The debug controller keeps the sessions by (actor name, rank) and serves them
to one client at a time over TCP (``protocol``): ``list``, ``attach``,
``cast``, ``continue``. Every client proves the job's secret and the server
proves it back, loopback included, and every message after that is sealed;
the controller leaves the secret for its own user's ``monarch debug`` in a
record only that user can read (``publish_record("debug", ...)``). A
session ends when pdb lets the actor run on without
breakpoints (``continue``), when the endpoint returns, or on ``quit``.
"""

from __future__ import annotations

import asyncio
import atexit
import bdb
import builtins
import contextlib
import dis
import hmac
import inspect
import linecache
import logging
import os
import pdb
import secrets
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from monarch_transport import job_secret

from .._api.actor import Actor, concurrent_endpoint
from .._api.singletons import get_or_spawn_controller
from .._core.config import debug_server_address
from .._core.current import current
from .._core.future import Future
from .._core.private import PrivateFileError, publish_record, remove_record
from .._core.process import get_runtime
from .commands import (
    HELP,
    Attach,
    Cast,
    CommandError,
    Continue,
    Detach,
    Help,
    ListSessions,
    Quit,
    parse_command,
    selects,
    table,
)
from .protocol import (
    HANDSHAKE_WAIT,
    MAX_HANDSHAKE_LINE,
    NONCE_BYTES,
    PROTOCOL_VERSION,
    RECORD_KIND,
    Seal,
    auth_body,
    client_proof,
    connection_key,
    decode_message,
    encode_message,
    parse_nonce,
    server_proof,
)

__all__ = [
    "DebugController",
    "DebugSessionInfo",
    "debug_controller",
    "install_breakpoint_hook",
]

log = logging.getLogger("monarch.actor.debugger")

CONTROLLER_NAME = "debug_controller"
TOP_PROMPT = "monarch_dbg> "
PDB_PROMPT = "(Pdb) "
MAX_HANDSHAKES = 16  # connections at once that have not proved the secret yet; more are dropped
BANNER = (
    "\n************************ MONARCH DEBUGGER ************************\n"
    "Enter 'help' for a list of commands.\n"
    "Enter 'list' to show all active breakpoints.\n\n"
)


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


# -- the debug controller (in the controller's process) --------------------------------


class _Session:
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


class DebugController(Actor):
    """The job's debugger: it holds every pdb session that ``breakpoint()``
    opened in an actor and serves them to ``monarch debug``.

    One per job, in the controller's process (``debug_controller()`` finds or
    spawns it). It listens at ``MONARCH_DEBUG_SERVER_HOST`` and
    ``MONARCH_DEBUG_SERVER_PORT`` (settings ``debug_server_host``,
    ``debug_server_port``; default ``localhost:27000``). Every client, on
    loopback too, proves the job's secret and hears the server prove it back;
    one client is served at a time (another is refused unless it asks to take
    over). While it listens, the controller leaves its address and the
    secret for its own user's tools (``publish_record("debug", ...)``, a file
    only that user can read). The ``debugger_*``
    endpoints are the sessions' side; users call ``list``,
    ``wait_pending_session`` and ``server_address``.
    """

    def __init__(self) -> None:
        self._sessions: dict[int, _Session] = {}
        self._by_key: dict[tuple[str, int], _Session] = {}
        self._next_sid = 0
        self._changed = asyncio.Condition()
        self._client: asyncio.Task[Any] | None = None
        self._attached = ""  # who the client is, for the refusal of a second one
        self._handshakes = 0  # connections still proving the secret
        self._loop = asyncio.get_running_loop()
        self._host, self._port = debug_server_address()
        self._secret = job_secret()  # fixed for the server's life, as in the record it leaves
        self._ready = asyncio.Event()
        self._listening: tuple[str, int] | None = None
        self._problem: str | None = None
        self._server: asyncio.Server | None = None
        self._closing = False
        self._start = self._loop.create_task(self._listen())
        get_runtime().lost_hooks.append(self._on_lost)

    # -- listening -------------------------------------------------------------------

    async def _listen(self) -> None:
        host, port = self._host, self._port
        try:
            if not 0 <= port <= 65535:
                raise ValueError(f"port {port} is not in 0..65535")
            bind = "127.0.0.1" if host.lower() == "localhost" else host
            # the stream limit bounds what a peer that has proved nothing can make us hold
            self._server = await asyncio.start_server(
                self._on_client, bind, port, limit=MAX_HANDSHAKE_LINE
            )
        except (OSError, ValueError) as error:
            self._problem = (
                f"the debug server cannot listen at {host}:{port}: {error}. Set "
                "MONARCH_DEBUG_SERVER_PORT (or configure(debug_server_port=...)) to a free "
                "port before the first breakpoint, and give `monarch debug` the same --port"
            )
            log.error("%s", self._problem)
        else:
            bound = self._server.sockets[0].getsockname()
            self._listening = (host, int(bound[1]))
            log.info("debug server listening at %s:%d", host, bound[1])
            _publish(id(self), host, int(bound[1]), self._secret)
        finally:
            self._ready.set()

    async def _where(self) -> tuple[str, int]:
        await self._ready.wait()
        if self._listening is None:
            raise RuntimeError(self._problem)
        return self._listening

    def _on_lost(self, address: str, reason: str) -> None:
        # called on the control loop; the sessions live on this actor's loop
        with contextlib.suppress(RuntimeError):  # the loop closed: this actor is gone
            self._loop.call_soon_threadsafe(self._lost, address, reason)

    def _lost(self, address: str, reason: str) -> None:
        for session in [s for s in self._sessions.values() if s.address == address]:
            self._end(session, "", f"its process was lost ({reason})")
            session.lines.put_nowait("")  # ends the read that waits for it

    async def __cleanup__(self, exc: BaseException | None) -> None:
        """Stop serving: the client hears that the program ends.

        Args:
            exc: why the actor stops (``None`` for a plain stop).
        """
        self._closing = True
        _unpublish(id(self))
        with contextlib.suppress(ValueError):
            get_runtime().lost_hooks.remove(self._on_lost)
        if self._server is not None:
            self._server.close()
        if self._client is not None and not self._client.done():
            self._client.cancel()
            with contextlib.suppress(BaseException):  # it says goodbye as it goes
                await self._client

    # -- the sessions' side --------------------------------------------------------------

    @concurrent_endpoint
    async def debugger_session_start(self, start: dict[str, Any]) -> int:
        """Register a session that ``breakpoint()`` opened (called by the hook).

        Args:
            start: the actor's name, rank, coordinates, host, pid, process
                address and where it stopped.

        Returns:
            The session's number, for the other ``debugger_*`` calls.

        Raises:
            RuntimeError: the debug server could not listen (the message says
                why and what to do).
        """
        host, port = await self._where()
        base, rank = str(start["actor_name"]), int(start["rank"])
        name, n = base, 1
        while (name, rank) in self._by_key:
            n += 1
            name = f"{base}#{n}"
        self._next_sid += 1
        session = _Session(self._next_sid, name, start)
        self._sessions[session.sid] = session
        self._by_key[(name, rank)] = session
        where = f"{session.function} ({session.filename}:{session.lineno})"
        if len(self._sessions) == 1:
            log.warning(
                "%s stopped at breakpoint() in %s on %s; attach with `monarch debug --host %s "
                "--port %d`",
                session.label,
                where,
                session.hostname,
                host,
                port,
            )
        else:
            log.info("%s stopped at breakpoint() in %s", session.label, where)
        await self._notify()
        return session.sid

    @concurrent_endpoint
    async def debugger_read(
        self, sid: int, output: str, function: str | None, filename: str | None, lineno: int | None
    ) -> str:
        """pdb asks for its next command (called by the session's stdin).

        Args:
            sid: the session's number.
            output: what pdb printed since its last command.
            function: the function pdb is stopped in.
            filename: its file.
            lineno: the line pdb is stopped at.

        Returns:
            The next command, once a client sends one.

        Raises:
            KeyError: no such session (it ended).
        """
        session = self._sessions.get(sid)
        if session is None:
            raise KeyError(f"no debug session {sid}: it ended")
        session.output.append(output)
        session.function, session.filename, session.lineno = function, filename, lineno
        session.turn.set()
        await self._notify()
        return await session.lines.get()

    @concurrent_endpoint
    async def debugger_session_end(self, sid: int, output: str, reason: str) -> None:
        """A session ended: the actor runs on (called by the hook).

        Args:
            sid: the session's number.
            output: what pdb printed last.
            reason: why it ended (``continued``, ``the endpoint returned``, ...).
        """
        session = self._sessions.get(sid)
        if session is not None:
            self._end(session, output, reason)
            await self._notify()

    def _end(self, session: _Session, output: str, reason: str) -> None:
        session.output.append(output)
        session.ended = reason
        session.turn.set()
        self._sessions.pop(session.sid, None)
        if self._by_key.get((session.name, session.rank)) is session:
            del self._by_key[(session.name, session.rank)]
        self._loop.create_task(self._notify())

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    # -- for users -------------------------------------------------------------------------

    @concurrent_endpoint
    async def wait_pending_session(
        self, count: int = 1, timeout: float | None = None
    ) -> list[DebugSessionInfo]:
        """Wait until ``count`` sessions wait for a pdb command.

        Args:
            count: how many sessions to wait for.
            timeout: the most seconds to wait (``None``: as long as it takes).

        Returns:
            The sessions then, as ``list`` gives them.

        Raises:
            TimeoutError: fewer sessions were waiting when ``timeout`` ran out.
        """

        def enough() -> bool:
            return sum(s.info().waiting for s in self._sessions.values()) >= count

        async with self._changed:
            try:
                await asyncio.wait_for(self._changed.wait_for(enough), timeout)
            except TimeoutError:
                raise TimeoutError(
                    f"{sum(s.info().waiting for s in self._sessions.values())} of {count} "
                    f"debug sessions were waiting after {timeout} s"
                ) from None
        return sorted(s.info() for s in self._sessions.values())

    @concurrent_endpoint
    async def server_address(self) -> tuple[str, int]:
        """Where the debug server listens, for ``monarch debug --host --port``.

        Returns:
            The host as configured and the port it listens on (the port the
            system chose when ``debug_server_port`` is 0).

        Raises:
            RuntimeError: it could not listen; the message says why.
        """
        return await self._where()

    # -- the client ------------------------------------------------------------------------

    async def _on_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = _Connection(reader, writer)
        if self._handshakes >= MAX_HANDSHAKES:
            # a flood of connections that never prove anything must not pile up
            log.warning("dropped a debug client from %s: too many handshakes at once", conn.peer)
            conn.close()
            return
        try:
            self._handshakes += 1
            try:
                async with asyncio.timeout(HANDSHAKE_WAIT):
                    takeover, who = await self._authenticate(conn)
            finally:
                self._handshakes -= 1
            previous = self._client
            if previous is not None and not previous.done():
                if not takeover:
                    log.warning(
                        "refused a debug client (%s): another is attached (%s)", who, self._attached
                    )
                    conn.bye(
                        f"another monarch debug client is attached ({self._attached}); pass "
                        "--takeover to replace it (DebugClient(takeover=True) in code)",
                        refused=True,
                    )
                    return
                log.warning(
                    "a debug client (%s) takes over from the one attached (%s)", who, self._attached
                )
            since = time.strftime("%Y-%m-%d %H:%M:%S")
            self._client, self._attached = asyncio.current_task(), f"since {since}, {who}"
            if previous is not None and not previous.done() and previous is not self._client:
                previous.cancel()  # asked for: the newest takes over
                with contextlib.suppress(BaseException):
                    await previous
            await conn.out(BANNER)
            await self._serve(conn)
        except asyncio.CancelledError:
            if self._closing:
                conn.bye("The program is ending: its debug server stops.\n")
            else:
                conn.bye("Another `monarch debug` attached to this debug server (--takeover).\n")
        except _Refused as refused:
            log.warning("refused a debug client from %s: %s", conn.peer, refused)
            conn.bye("it did not prove the job's secret", refused=True)
        except TimeoutError:
            log.warning("dropped a debug client from %s: no handshake in time", conn.peer)
        except ValueError as error:  # a message that is no protocol or fails its check
            log.warning("closed the debug client from %s: %s", conn.peer, error)
        except (ConnectionError, EOFError, asyncio.IncompleteReadError):
            pass  # the client went away: the sessions stay for the next
        finally:
            conn.close()

    async def _authenticate(self, conn: _Connection) -> tuple[bool, str]:
        """Both sides prove the job's secret (``protocol``); from here
        on, ``conn`` seals what it sends and checks what it receives.

        Returns:
            Whether the client asks to take over, and who it is.
        """
        server_nonce = secrets.token_bytes(NONCE_BYTES)
        hello = encode_message("hello", version=PROTOCOL_VERSION, nonce=server_nonce.hex())
        conn.writer.write(hello)
        await conn.writer.drain()
        line = await conn.read_line(MAX_HANDSHAKE_LINE)
        try:
            auth = decode_message(line)
        except ValueError as error:
            raise _Refused(f"its first message is no protocol message ({error})") from None
        client_nonce = parse_nonce(auth.get("nonce"))
        given = auth.get("proof")
        takeover = auth.get("takeover", False)
        if auth["t"] != "auth" or client_nonce is None or not isinstance(given, str):
            raise _Refused(f"it sent {auth['t']!r} instead of proving the job's secret")
        if not isinstance(takeover, bool):
            raise _Refused("its takeover field is no boolean")
        key = connection_key(self._secret, server_nonce, client_nonce)
        expected = client_proof(key, hello, auth_body(auth))
        if not hmac.compare_digest(given.encode(), expected.encode()):
            raise _Refused("it did not prove the job's secret")
        conn.writer.write(encode_message("welcome", proof=server_proof(key, hello, line)))
        conn.seal = Seal(key, server=True)
        # pid and host are the client's word, covered by its proof; the peer is the socket's
        return takeover, f"pid {auth.get('pid')!r} on {auth.get('host')!r}, peer {_peer(conn)}"

    async def _serve(self, conn: _Connection) -> None:
        while True:
            line = await conn.prompt(TOP_PROMPT)
            if not line.strip():
                continue
            try:
                command = parse_command(line)
                if isinstance(command, Quit):
                    conn.bye("Leaving the debugger; the sessions stay in place.\n")
                    return
                await self._run(conn, command)
            except CommandError as error:
                await conn.out(f"error: {error}\n")

    async def _run(self, conn: _Connection, command: Any) -> None:
        if isinstance(command, ListSessions):
            infos = sorted(s.info() for s in self._sessions.values())
            if not infos:
                await conn.out("No debug sessions: no actor is stopped at breakpoint().\n")
            else:
                await conn.out(_session_table(infos))
        elif isinstance(command, Help):
            await conn.out(HELP)
        elif isinstance(command, Detach):
            await conn.out("Not attached to a session; 'attach <actor> <rank>' attaches.\n")
        elif isinstance(command, Attach):
            await self._attach(conn, self._find(command.actor, command.rank))
        elif isinstance(command, Cast):
            await self._cast(conn, command)
        elif isinstance(command, Continue):
            await self._continue(conn)

    def _find(self, actor: str, rank: int) -> _Session:
        session = self._by_key.get((actor, rank))
        if session is not None:
            return session
        ranks = sorted(s.rank for s in self._sessions.values() if s.name == actor)
        if ranks:
            raise CommandError(
                f"{actor} has no debug session at rank {rank}; its sessions are at ranks "
                f"{', '.join(map(str, ranks))} ('list' shows them)"
            )
        raise CommandError(f"{self._no_actor(actor)} ('list' shows the sessions)")

    def _no_actor(self, actor: str) -> str:
        names = sorted({s.name for s in self._sessions.values()})
        if not names:
            return f"no actor named {actor!r} is stopped at breakpoint(): no actor is"
        return f"no actor named {actor!r} is stopped at breakpoint(); these are: {', '.join(names)}"

    async def _attach(self, conn: _Connection, session: _Session) -> None:
        await conn.out(f"Attached to debug session for {session.label} ({session.hostname})\n")
        if not session.turn.is_set():
            await conn.out("(it is running; waiting for pdb to stop it)\n")
        await session.turn.wait()
        shown = "".join(session.output)
        while True:
            body, prompt = _split_prompt(shown)
            await conn.out(body)
            if session.ended is not None:
                await conn.out(f"Debug session for {session.label} ended: {session.ended}\n")
                return
            line = await conn.prompt(prompt)
            if line.strip() == "detach":
                await conn.out(f"Detached from debug session for {session.label}\n")
                return
            shown = await session.command(line)

    async def _cast(self, conn: _Connection, cast: Cast) -> None:
        chosen = [
            s
            for s in self._sessions.values()
            if s.name == cast.actor and selects(cast.ranks, s.rank, s.coords)
        ]
        if not chosen:
            ranks = sorted(s.rank for s in self._sessions.values() if s.name == cast.actor)
            if not ranks:
                raise CommandError(self._no_actor(cast.actor))
            raise CommandError(
                f"the ranks given select no session of {cast.actor}; its sessions are at ranks "
                f"{', '.join(map(str, ranks))}"
            )
        await self._each(conn, sorted(chosen, key=lambda s: s.rank), [cast.command])

    async def _continue(self, conn: _Connection) -> None:
        sessions = sorted(self._sessions.values(), key=lambda s: (s.name, s.rank))
        if not sessions:
            await conn.out("No debug sessions to continue.\n")
            return
        await self._each(conn, sessions, ["clear", "continue"], quiet=True)

    async def _each(
        self, conn: _Connection, sessions: list[_Session], lines: list[str], quiet: bool = False
    ) -> None:
        """Send ``lines`` to every session at once; print each one's output under its label."""

        async def run(session: _Session) -> str:
            if not session.turn.is_set():
                return f"[{session.label}] is running, not stopped at a pdb prompt: skipped\n"
            outputs = [await session.command(line) for line in lines]
            text = "" if quiet else "".join(_split_prompt(o)[0] for o in outputs)
            shown = "".join(f"[{session.label}] {row}\n" for row in text.splitlines())
            if session.ended is not None:
                shown += f"[{session.label}] {session.ended}\n"
            return shown

        for shown in await asyncio.gather(*(run(s) for s in sessions)):
            await conn.out(shown)

    @concurrent_endpoint
    async def source(self, path: str) -> str | None:
        """The text of a Python file of the controller's machine (called by sessions).

        An actor class defined in the script travels by value, without its
        file: pdb shows its lines from the script here.

        Args:
            path: the file, as the script's ``__file__`` names it.

        Returns:
            Its text; ``None`` if it is no ``.py`` file or cannot be read.
        """
        if not path.endswith(".py"):
            return None
        try:
            return Path(path).read_text()
        except (OSError, UnicodeDecodeError):
            return None

    # last in the class: below this point, ``list`` names the endpoint
    @concurrent_endpoint
    async def list(self, print_output: bool = False) -> builtins.list[DebugSessionInfo]:
        """The sessions: every actor stopped in pdb, by actor name and rank.

        Args:
            print_output: also log the table (logger ``monarch.actor.debugger``).

        Returns:
            One ``DebugSessionInfo`` per session, sorted by actor name and rank.
        """
        infos = sorted(s.info() for s in self._sessions.values())
        if print_output:
            log.info("debug sessions:\n%s", _session_table(infos))
        return infos


def _split_prompt(text: str) -> tuple[str, str]:
    """pdb's output without its trailing prompt, and that prompt."""
    if text.endswith(PDB_PROMPT):
        return text[: -len(PDB_PROMPT)], PDB_PROMPT
    return text, PDB_PROMPT


def _session_table(infos: list[DebugSessionInfo]) -> str:
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


class _Refused(Exception):
    """A client failed the handshake; the text says how (for the log only)."""


def _peer(conn: _Connection) -> str:
    peer = conn.peer
    if isinstance(peer, tuple) and len(peer) >= 2:
        return f"{peer[0]}:{peer[1]}"
    return str(peer)


class _Connection:
    """One client's connection: protocol messages over a stream, sealed once
    the handshake set ``seal``."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.peer = writer.get_extra_info("peername")
        self.seal: Seal | None = None

    def _encode(self, kind: str, **fields: Any) -> bytes:
        if self.seal is None:
            return encode_message(kind, **fields)
        return self.seal.seal(kind, **fields)

    async def send(self, kind: str, **fields: Any) -> None:
        self.writer.write(self._encode(kind, **fields))
        await self.writer.drain()

    async def read_line(self, limit: int) -> bytes:
        """The next line, at most ``limit`` bytes.

        Raises:
            EOFError: the client closed the connection.
            ValueError: the line is longer than ``limit``.
        """
        parts: list[bytes] = []
        size = 0
        while True:
            try:
                part = await self.reader.readuntil(b"\n")
                done = True
            except asyncio.IncompleteReadError as error:
                if error.partial or parts:
                    raise ValueError("the client's last line is cut off") from None
                raise EOFError("the client closed the connection") from None
            except asyncio.LimitOverrunError as error:
                # more than the stream's limit without a newline yet: take it in pieces
                part = await self.reader.readexactly(error.consumed)
                done = False
            size += len(part)
            if size > limit:
                raise ValueError(f"the client sent a line of more than {limit} bytes")
            parts.append(part)
            if done:
                return b"".join(parts)

    async def receive(self) -> dict[str, Any]:
        if self.seal is None:  # nothing is read as a command before the handshake
            raise ValueError("a message before the handshake")
        return self.seal.open(await self.read_line(_MAX_LINE))

    async def out(self, text: str) -> None:
        if text:
            await self.send("out", text=text)

    async def prompt(self, text: str) -> str:
        await self.send("prompt", text=text)
        answer = await self.receive()
        if answer.get("t") != "line" or not isinstance(answer.get("text"), str):
            raise ValueError("expected a line")
        return str(answer["text"])

    def bye(self, text: str, refused: bool = False) -> None:
        with contextlib.suppress(Exception):
            self.writer.write(self._encode("bye", text=text, refused=refused))

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()


_MAX_LINE = 1 << 16  # bytes: the longest sealed line a client may send (a pdb command)


# -- the record ``monarch debug`` finds the secret in ----------------------------------------

_servers: dict[int, tuple[str, int, bytes]] = {}  # the debug servers of this process, oldest first
_servers_lock = threading.Lock()
_exit_hook = False


def _publish(server: int, host: str, port: int, secret: bytes) -> None:
    """Leave the address and the secret of this process's debug servers for
    this user's ``monarch debug`` (one record per process)."""
    global _exit_hook
    with _servers_lock:
        _servers[server] = (host, port, secret)
        if not _exit_hook:
            atexit.register(_unpublish_all)
            _exit_hook = True
        _write_record()


def _unpublish(server: int) -> None:
    with _servers_lock:
        if _servers.pop(server, None) is None:
            return
        if _servers:
            _write_record()
        else:
            remove_record(RECORD_KIND)


def _unpublish_all() -> None:
    with _servers_lock:
        if _servers:
            _servers.clear()
            remove_record(RECORD_KIND)


def _write_record() -> None:
    host, port, secret = list(_servers.values())[-1]
    record = {
        "host": host,
        "port": port,
        "secret": secret.hex(),
        "hostname": socket.gethostname(),
        "servers": [{"host": h, "port": p, "secret": k.hex()} for h, p, k in _servers.values()],
    }
    try:
        publish_record(RECORD_KIND, record)
    except (OSError, PrivateFileError) as error:
        log.warning(
            "could not leave the debug server's record for `monarch debug`: %s; run it with "
            "this program's MONARCH_JOB_SECRET instead",
            error,
        )


# -- finding the debug controller ----------------------------------------------------------

_found: tuple[Any, Any] | None = None  # (runtime, controller): a new runtime finds it again
_finding = threading.Lock()


def debug_controller() -> DebugController:
    """The job's debug controller, spawned in the controller's process on first use.

    Calling it from the script starts the debug server before any actor calls
    ``breakpoint()``, so ``monarch debug`` can connect early.

    Returns:
        The one-actor mesh of ``DebugController``.

    Examples:
        >>> from monarch_actor import debug_controller
        >>> debug_controller().list.call_one().get()
        []
    """
    global _found
    runtime = get_runtime()
    with _finding:
        if _found is None or _found[0] is not runtime:
            future = get_or_spawn_controller(CONTROLLER_NAME, DebugController)
            _found = (runtime, _wait(future))
        return _found[1]  # type: ignore[no-any-return]


def _wait(future: Future[Any]) -> Any:
    # blocking is what a breakpoint does, even on an async actor's loop: no warning
    return future._cf.result()


# -- the session's side (in the actor's process) -----------------------------------------------

_previous_hook: Callable[..., Any] = sys.__breakpointhook__
_active = threading.local()  # .session: the _RemotePdb of this thread's open session
_SUSPENDS = {op for name, op in dis.opmap.items() if name in ("YIELD_VALUE", "RESUME")}
_BY_VALUE = "<dynamic-code>"  # what cloudpickle names the file of code it carries by value
_RESUMABLE = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR


def install_breakpoint_hook() -> None:
    """Make ``breakpoint()`` in actors open a session with the debug controller
    (once per process; elsewhere the hook in place before still serves it)."""
    global _previous_hook
    if sys.breakpointhook is not _breakpointhook:
        _previous_hook = sys.breakpointhook
        sys.breakpointhook = _breakpointhook


def _breakpointhook(*args: Any, **kwargs: Any) -> Any:
    ctx = current()
    if ctx is None or getattr(ctx.actor_instance, "_host", None) is None:
        return _previous_hook(*args, **kwargs)
    if os.environ.get("PYTHONBREAKPOINT", "").strip() == "0":
        return None  # breakpoints are switched off, as for plain Python
    frame = sys._getframe(1)
    session: _RemotePdb | None = getattr(_active, "session", None)
    if session is None or session.ended:
        session = _RemotePdb.open(ctx, frame)
        _active.session = session
    session.set_trace(frame)  # last: what runs after it is traced
    return None


class _Output:
    """pdb's stdout: kept until pdb next asks for input."""

    encoding = "utf-8"

    def __init__(self) -> None:
        self.parts: list[str] = []

    def write(self, text: str) -> int:
        self.parts.append(text)
        return len(text)

    def flush(self) -> None:
        return None

    def take(self) -> str:
        text = "".join(self.parts)
        self.parts.clear()
        return text


class _Input:
    """pdb's stdin: each line comes from the debug controller."""

    encoding = "utf-8"

    def __init__(self, session: _RemotePdb) -> None:
        self.session = session

    def readline(self) -> str:
        return self.session.exchange()


class _RemotePdb(pdb.Pdb):
    """A pdb whose terminal is the debug controller."""

    def __init__(self, controller: Any, sid: int, label: str, endpoint_frame: FrameType | None):
        self.controller = controller
        self.sid = sid
        self.label = label
        self.ended = False
        self.endpoint_frame = endpoint_frame
        self.out = _Output()
        self.sources: dict[str, list[str]] = {}  # the lines of files of code that came by value
        super().__init__(
            stdin=_Input(self),  # type: ignore[arg-type]
            stdout=self.out,  # type: ignore[arg-type]
            skip=[__name__],
            nosigint=True,
            readrc=False,
        )

    @classmethod
    def open(cls, ctx: Any, frame: FrameType) -> _RemotePdb:
        instance = ctx.actor_instance
        label = f"{instance.name} {instance.rank.rank}"
        if isinstance(getattr(instance._host, "instance", None), DebugController):
            raise RuntimeError("breakpoint() inside the debug controller cannot be served by it")
        runtime = get_runtime()
        start = {
            "actor_name": instance.name,
            "rank": instance.rank.rank,
            "coords": dict(instance.rank),
            "hostname": socket.gethostname(),
            "pid": os.getpid(),
            "address": runtime.address,
            "function": frame.f_code.co_qualname,
            "filename": _filename(frame),
            "lineno": frame.f_lineno,
        }
        controller = debug_controller()
        try:
            sid = _wait(controller.debugger_session_start.call_one(start))
        except Exception as error:
            cause = getattr(error, "exception", error)  # an ActorError: the controller's own
            raise RuntimeError(
                f"breakpoint() in {label} cannot be served by the debug controller: {cause}"
            ) from None
        return cls(controller, sid, label, _endpoint_frame(frame))

    # -- the terminal ------------------------------------------------------------------

    def exchange(self) -> str:
        """Hand pdb's output to the controller; pdb's next command."""
        text = self.out.take()
        frame = self.curframe
        where = (
            (frame.f_code.co_qualname, _filename(frame), frame.f_lineno)
            if frame is not None
            else (None, None, None)
        )
        try:
            line = _wait(self.controller.debugger_read.call_one(self.sid, text, *where))
        except Exception as error:
            self._forget()
            log.error("the debug session of %s lost its debug controller: %s", self.label, error)
            raise bdb.BdbQuit(f"the debug session of {self.label} lost its controller") from None
        return f"{line}\n"

    def _forget(self) -> None:
        self.ended = True
        if getattr(_active, "session", None) is self:
            _active.session = None

    def finish(self, reason: str) -> None:
        """The session is over: tell the controller (once)."""
        if self.ended:
            return
        self._forget()
        try:
            _wait(self.controller.debugger_session_end.call_one(self.sid, self.out.take(), reason))
        except Exception as error:
            log.warning("could not end the debug session of %s: %s", self.label, error)

    # -- when the session ends -------------------------------------------------------------

    def set_continue(self) -> None:
        super().set_continue()
        if not self.breaks:  # pdb stopped tracing: nothing will stop the actor again
            self.finish("continued")

    def set_quit(self) -> None:
        super().set_quit()
        self.finish("quit (the endpoint raises bdb.BdbQuit)")

    def trace_dispatch(self, frame: FrameType, event: str, arg: Any) -> Any:
        if frame is not self.endpoint_frame:
            return super().trace_dispatch(frame, event, arg)
        super().trace_dispatch(frame, event, arg)
        if event == "return" and not _suspending(frame):
            self._endpoint_returned()
            return None
        return self.trace_dispatch  # keep watching the endpoint's frame, even across awaits

    def _endpoint_returned(self) -> None:
        self.finish("the endpoint returned")
        self.clear_all_breaks()
        sys.settrace(None)
        frame = self.endpoint_frame
        while frame is not None:  # no stale trace function for a later session to meet
            frame.f_trace = None
            frame = frame.f_back
        self.endpoint_frame = None

    # -- source lines of code that came by value -------------------------------------------

    def print_stack_entry(self, frame_lineno: Any, *args: Any, **kwargs: Any) -> None:
        self._show_source_of(frame_lineno[0])
        super().print_stack_entry(frame_lineno, *args, **kwargs)

    def format_stack_entry(self, frame_lineno: Any, *args: Any, **kwargs: Any) -> str:
        text: str = super().format_stack_entry(frame_lineno, *args, **kwargs)
        frame = frame_lineno[0]
        if frame.f_code.co_filename == _BY_VALUE:
            text = text.replace(_BY_VALUE, _filename(frame), 1)
        return text

    def _show_source_of(self, frame: FrameType) -> None:
        """Give linecache the script's lines for code that cloudpickle brought
        without its file (its frames name the file ``<dynamic-code>``)."""
        if frame.f_code.co_filename != _BY_VALUE:
            return
        path = frame.f_globals.get("__file__")
        if not isinstance(path, str):
            return
        lines = self.sources.get(path)
        if lines is None:
            try:
                text: str | None = Path(path).read_text()
            except (OSError, UnicodeDecodeError):  # the script is on the controller's machine
                try:
                    text = _wait(self.controller.source.call_one(path))
                except Exception:
                    text = None
            lines = self.sources[path] = (text or "").splitlines(keepends=True)
        if lines:
            linecache.cache[_BY_VALUE] = (sum(map(len, lines)), None, lines, _BY_VALUE)

    # -- commands that would wait on the process's own terminal ----------------------------

    def do_clear(self, arg: str) -> None:
        """cl(ear) [filename:lineno | bpnumber ...]
        Without argument, clear all breakpoints (without asking)."""
        if arg:
            super().do_clear(arg)
            return
        cleared = [bp for bp in bdb.Breakpoint.bpbynumber if bp]
        self.clear_all_breaks()
        for bp in cleared:
            self.message(f"Deleted {bp}")

    do_cl = do_clear

    def do_interact(self, arg: str) -> None:
        """interact
        Not available in a remote session: use p, pp or ! statements."""
        self.error("interact needs the actor process's terminal; use p, pp or ! statements")


def _endpoint_frame(frame: FrameType) -> FrameType | None:
    """The outermost frame of the code the actor runs (the endpoint): the one
    the runtime called."""
    inner: FrameType | None = None
    walk: FrameType | None = frame
    while walk is not None:
        if str(walk.f_globals.get("__name__", "")).startswith("monarch_actor."):
            return inner
        inner, walk = walk, walk.f_back
    return None


def _filename(frame: FrameType) -> str:
    """The file of ``frame``'s code; for code that came by value, the file it came from."""
    name = frame.f_code.co_filename
    if name == _BY_VALUE:
        origin = frame.f_globals.get("__file__")
        if isinstance(origin, str):
            return origin
    return name


def _suspending(frame: FrameType) -> bool:
    """Whether a ``return`` event of ``frame`` is a coroutine pausing at an
    ``await`` (it resumes later), not its end."""
    if not frame.f_code.co_flags & _RESUMABLE:
        return False
    code = frame.f_code.co_code
    return 0 <= frame.f_lasti < len(code) and code[frame.f_lasti] in _SUSPENDS
