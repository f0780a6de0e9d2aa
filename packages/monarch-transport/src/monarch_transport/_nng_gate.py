"""The nng backend's TCP front door: connections are accepted here, counted
and held to a deadline from their first moment, and handed to nng only once
they have sent a whole SP greeting.

nng's own TCP listener accepts every connection and keeps it for up to ten
seconds while it waits for the peer's 8-byte SP header; only then does a pipe
exist that the listener's handshake limits can see. A peer that connects and
sends less held a descriptor in the job's process uncounted, so enough of
them would exhaust its descriptors. Here each connection counts against the
listener's ``max_unauthenticated`` from ``accept``, waits at most the
handshake timeout for its greeting (peeked, not read, so nng still sees it),
and is closed at once when the gate is full or the greeting is wrong. A
connection that passes is given to nng's ``socket://`` transport, which
speaks the same protocol over it.

Connections are given to nng one at a time, each once nng has made a pipe
of the one before (``handed``): nng 1.11 loses descriptors it is given while
it has not yet taken the previous one (40 given at once made 22 pipes here;
one at a time, 100 of 100, 67 µs each).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import errno
import logging
import socket
from collections.abc import Callable

__all__ = ["GREETING", "GreetingGate"]

log = logging.getLogger("monarch.transport.nng")
GREETING = b"\x00SP\x00\x00\x11\x00\x00"  # the SP header of a PAIR1 peer (nng's)
RETRY_ACCEPT = 0.1  # seconds to wait when the process is out of descriptors


class GreetingGate:
    """Accept on ``listening`` (a bound, listening, non-blocking TCP socket)
    and give each connection that greets properly to ``admit`` (it takes the
    descriptor, or raises and leaves it ours). ``waiting()`` tells how many
    other connections of the listener are still authenticating, for the
    shared cap.

    Args:
        listening: the bound socket.
        admit: takes a connected descriptor that sent the PAIR1 greeting.
        waiting: connections past the gate that have not authenticated yet.
        limit: how many connections may be unauthenticated at once.
        timeout: seconds a connection has to send its greeting.
        where: the listener's address, for the log.
    """

    def __init__(
        self,
        listening: socket.socket,
        admit: Callable[[int], None],
        waiting: Callable[[], int],
        *,
        limit: int,
        timeout: float,
        where: str,
    ) -> None:
        self._listening = listening
        self._admit = admit
        self._waiting = waiting
        self._limit = limit
        self._timeout = timeout
        self._where = where
        self._loop = asyncio.get_running_loop()
        self._greeting: dict[socket.socket, asyncio.TimerHandle] = {}
        self._ready: collections.deque[socket.socket] = collections.deque()  # greeted, queued
        self._handing: asyncio.TimerHandle | None = None  # until nng has made its pipe
        self._closed = False
        self._loop.add_reader(listening.fileno(), self._accept)

    @property
    def greeting(self) -> int:
        """Connections accepted that have not sent their greeting yet."""
        return len(self._greeting)

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._listening.accept()
            except BlockingIOError:
                return
            except OSError as error:
                if error.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    # out of descriptors: stop reading for a moment instead of spinning
                    self._loop.remove_reader(self._listening.fileno())
                    self._loop.call_later(RETRY_ACCEPT, self._resume)
                    log.warning("cannot accept on %s: %s", self._where, error)
                return
            crowded = len(self._greeting) + self._waiting()
            if crowded >= self._limit:
                log.warning(
                    "refusing a connection on %s: %d connections are already authenticating "
                    "(max_unauthenticated)",
                    self._where,
                    crowded,
                )
                conn.close()
                continue
            conn.setblocking(False)
            self._greeting[conn] = self._loop.call_later(
                self._timeout, self._drop, conn, "sent no greeting in time"
            )
            self._loop.add_reader(conn.fileno(), self._peek, conn)

    def _resume(self) -> None:
        if not self._closed:
            self._loop.add_reader(self._listening.fileno(), self._accept)

    def _peek(self, conn: socket.socket) -> None:
        try:
            seen = conn.recv(len(GREETING), socket.MSG_PEEK)
        except BlockingIOError:
            return
        except OSError as error:
            self._drop(conn, f"broke before its greeting: {error}", quiet=True)
            return
        if not seen:
            self._drop(conn, "closed before its greeting", quiet=True)
        elif GREETING[: len(seen)] != seen:
            self._drop(conn, "is not an nng PAIR1 peer (wrong greeting)")
        elif len(seen) == len(GREETING):
            # still counted and under its deadline until it is nng's
            with contextlib.suppress(ValueError, OSError):
                self._loop.remove_reader(conn.fileno())
            self._ready.append(conn)
            self._pump()

    def _pump(self) -> None:
        """Give nng the next greeted connection, unless it is still taking one."""
        while self._handing is None and self._ready and not self._closed:
            conn = self._ready.popleft()
            if conn not in self._greeting:
                continue  # its deadline passed while it queued
            self._forget(conn)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            fd = conn.detach()
            try:
                self._admit(fd)
            except Exception as error:  # nng refused it: the descriptor is still ours
                socket.socket(fileno=fd).close()
                log.warning("nng did not take a connection on %s: %s", self._where, error)
                continue
            self._handing = self._loop.call_later(self._timeout, self.handed)

    def handed(self) -> None:
        """nng made a pipe of the connection it was given last: give it the next."""
        if self._handing is not None:
            self._handing.cancel()
            self._handing = None
        self._pump()

    def _forget(self, conn: socket.socket) -> None:
        deadline = self._greeting.pop(conn, None)
        if deadline is not None:
            deadline.cancel()
        with contextlib.suppress(ValueError, OSError):
            self._loop.remove_reader(conn.fileno())

    def _drop(self, conn: socket.socket, why: str, quiet: bool = False) -> None:
        self._forget(conn)
        with contextlib.suppress(ValueError):
            self._ready.remove(conn)
        conn.close()
        if quiet:  # a port probe (a health check) hangs up before greeting: not an attack
            log.debug("a connection on %s %s", self._where, why)
        else:
            log.warning("closing a connection on %s: it %s", self._where, why)

    def close(self) -> None:
        """Stop accepting; close the listening socket and every connection still greeting."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(ValueError, OSError):
            self._loop.remove_reader(self._listening.fileno())
        self._listening.close()
        if self._handing is not None:
            self._handing.cancel()
        for conn in list(self._greeting):
            self._forget(conn)
            conn.close()
        self._ready.clear()
