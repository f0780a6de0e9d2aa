"""The debug controller's TCP server: it serves the sessions to one
``monarch debug`` client at a time (``list``, ``attach``, ``cast``,
``continue``). Every client, on loopback too, proves the job's secret and
hears the server prove it back (``protocol``); every message after that is
sealed. While it listens, the process leaves the address and the secret for
its own user's tools in a record only that user can read
(``publish_record("debug", ...)``)."""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import hmac
import logging
import secrets
import socket
import threading
import time
from typing import Any

from .._core.private import PrivateFileError, publish_record, remove_record
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
from .sessions import Session, Sessions, session_table

__all__ = ["DebugServer"]

log = logging.getLogger("monarch.actor.debugger")

TOP_PROMPT = "monarch_dbg> "
PDB_PROMPT = "(Pdb) "
MAX_HANDSHAKES = 16  # connections at once that have not proved the secret yet; more are dropped
BANNER = (
    "\n************************ MONARCH DEBUGGER ************************\n"
    "Enter 'help' for a list of commands.\n"
    "Enter 'list' to show all active breakpoints.\n\n"
)


class DebugServer:
    """Serves one debug controller's ``sessions`` over TCP at ``host:port``
    (port 0: one the system chooses), proving ``secret``; on the
    controller's loop."""

    def __init__(self, sessions: Sessions, host: str, port: int, secret: bytes) -> None:
        self.sessions = sessions
        self._host, self._port = host, port
        self._secret = secret  # fixed for the server's life, as in the record it leaves
        self._client: asyncio.Task[Any] | None = None
        self._attached = ""  # who the client is, for the refusal of a second one
        self._handshakes = 0  # connections still proving the secret
        self._ready = asyncio.Event()
        self._listening: tuple[str, int] | None = None
        self._problem: str | None = None
        self._server: asyncio.Server | None = None
        self._closing = False

    async def listen(self) -> None:
        """Listen at the configured address; on failure, say why in ``where``."""
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

    async def where(self) -> tuple[str, int]:
        """Where it listens, once it does.

        Raises:
            RuntimeError: it could not listen; the message says why.
        """
        await self._ready.wait()
        if self._listening is None:
            raise RuntimeError(self._problem)
        return self._listening

    async def close(self) -> None:
        """Stop serving: the client hears that the program ends."""
        self._closing = True
        _unpublish(id(self))
        if self._server is not None:
            self._server.close()
        if self._client is not None and not self._client.done():
            self._client.cancel()
            with contextlib.suppress(BaseException):  # it says goodbye as it goes
                await self._client

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
            infos = self.sessions.infos()
            if not infos:
                await conn.out("No debug sessions: no actor is stopped at breakpoint().\n")
            else:
                await conn.out(session_table(infos))
        elif isinstance(command, Help):
            await conn.out(HELP)
        elif isinstance(command, Detach):
            await conn.out("Not attached to a session; 'attach <actor> <rank>' attaches.\n")
        elif isinstance(command, Attach):
            await self._attach(conn, self.sessions.find(command.actor, command.rank))
        elif isinstance(command, Cast):
            await self._cast(conn, command)
        elif isinstance(command, Continue):
            await self._continue(conn)

    async def _attach(self, conn: _Connection, session: Session) -> None:
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
            for s in self.sessions.values()
            if s.name == cast.actor and selects(cast.ranks, s.rank, s.coords)
        ]
        if not chosen:
            ranks = sorted(s.rank for s in self.sessions.values() if s.name == cast.actor)
            if not ranks:
                raise CommandError(self.sessions.no_actor(cast.actor))
            raise CommandError(
                f"the ranks given select no session of {cast.actor}; its sessions are at ranks "
                f"{', '.join(map(str, ranks))}"
            )
        await self._each(conn, sorted(chosen, key=lambda s: s.rank), [cast.command])

    async def _continue(self, conn: _Connection) -> None:
        sessions = sorted(self.sessions.values(), key=lambda s: (s.name, s.rank))
        if not sessions:
            await conn.out("No debug sessions to continue.\n")
            return
        await self._each(conn, sessions, ["clear", "continue"], quiet=True)

    async def _each(
        self, conn: _Connection, sessions: list[Session], lines: list[str], quiet: bool = False
    ) -> None:
        """Send ``lines`` to every session at once; print each one's output under its label."""

        async def run(session: Session) -> str:
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


def _split_prompt(text: str) -> tuple[str, str]:
    """pdb's output without its trailing prompt, and that prompt."""
    if text.endswith(PDB_PROMPT):
        return text[: -len(PDB_PROMPT)], PDB_PROMPT
    return text, PDB_PROMPT


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
