"""The controller's side of a worker on another host: the same calls as the
local ``HostAgent`` (``spawn``, ``kill``), carried as ``Kind.HOST`` messages,
and the worker's events heard back.

A host is declared lost when its connection breaks or when it stays silent
for ``MONARCH_HOST_DEADLINE`` seconds (default 5; a worker says it is alive
every second): every process it ran is then reported lost, with the host's
name, so callers hear of it at once rather than at their own timeouts.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import logging
import signal
from collections.abc import Callable
from typing import Any

from monarch_transport import SECRET_ENV, AuthenticationError, decode

from .._core.config import attach_timeout, host_deadline
from .._core.router import Frames, Runtime
from .._core.wire import Key, Kind
from .agent import preload, start_blob

__all__ = ["ATTACH_TIMEOUT_ENV", "HOST_DEADLINE_ENV", "RemoteAgent", "RemoteAgents"]

log = logging.getLogger("monarch.actor.hosts")
HOST_DEADLINE_ENV = "MONARCH_HOST_DEADLINE"
ATTACH_TIMEOUT_ENV = "MONARCH_ATTACH_TIMEOUT"
SECRET_FILE_ENV = "MONARCH_JOB_SECRET_FILE"
RETRY = 0.25  # seconds between tries to reach a worker that is not up yet
KILL_CONFIRM = 2.0  # seconds a worker gets to confirm a kill before the process counts as gone

# (table, rank, code, last words) of a process that exited, or (table, rank, None, reason)
# of one lost with its host
OnExit = Callable[[Any, int, "int | None", str], None]


class RemoteAgent:
    """A worker's host agent, seen from the controller (methods on the loop,
    except ``spawn`` and ``kill``, which may be called from any thread)."""

    def __init__(self, runtime: Runtime, address: str, on_exit: OnExit) -> None:
        self.runtime = runtime
        self.address = address
        self.on_exit = on_exit
        self.hostname = address  # until the worker says its name
        self.info: dict[str, Any] = {}
        self.ready: concurrent.futures.Future[dict[str, Any]] = concurrent.futures.Future()
        self.down: concurrent.futures.Future[None] = concurrent.futures.Future()  # it shut down
        self.ids = itertools.count()
        self.requests: dict[int, tuple[Any, int]] = {}  # request -> (table, rank), until it exits
        self.pids: dict[int, int] = {}  # pid -> request, once forked
        self.last_seen = runtime.loop.time()
        self.lost: str | None = None
        self.shutting_down = False
        self.deadline = host_deadline()
        # a worker may come up after the controller asks for it (a job starting)
        self.attach_by = runtime.loop.time() + attach_timeout()

    def _send(self, op: str, payload: Any = None, **fields: Any) -> None:
        header = {Key.KIND: Kind.HOST, Key.HOST_OP: op, Key.OWNER: self.runtime.address, **fields}
        self.runtime.send(self.address, header, payload)

    def hello(self) -> None:
        self.runtime.reset_peer(self.address)
        # the worker's fork server (started with the worker) imports what this script
        # uses too, and the worker answers under the address dialed here (one listening
        # on every interface knows itself only as tcp://0.0.0.0:PORT)
        self._send("hello", None, preload=preload(), worker=self.address)

    def unreachable(self, reason: str) -> None:
        """The connection failed: before the worker ever answered, try again
        until the attach deadline; after, the host is lost."""
        now = self.runtime.loop.time()
        refused = self.runtime.refused.pop(self.address, None)
        if refused is not None and self.lost is None:
            # a worker that answers with another secret will not change its mind: say so now
            self.host_lost(
                f"authentication was refused between this script and the worker at "
                f"{self.address}: {refused}. They hold different job secrets: check that "
                f"{SECRET_ENV} (or the file {SECRET_FILE_ENV} names) is the same on that "
                "worker and in this script",
                AuthenticationError,
            )
        elif self.ready.done() or self.lost is not None:
            self.host_lost(f"the connection to its worker broke ({reason})")
        elif now > self.attach_by:
            self.host_lost(
                f"no worker answered there within {attach_timeout():g} s ({ATTACH_TIMEOUT_ENV}); "
                f"is its worker running and serving that address? last error: {reason}"
            )
        else:
            self.runtime.loop.call_later(RETRY, self._retry)

    def _retry(self) -> None:
        if self.lost is None and not self.ready.done():
            self.hello()

    def spawn(
        self, table: Any, rank: int, info: dict[str, Any], command: dict[str, Any] | None = None
    ) -> None:
        """Ask the worker to fork a process for ``rank`` of ``table`` (which
        executes ``command``, a ``command_spec``, when one is given)."""
        request = next(self.ids)
        blob = start_blob(info)
        extra = {} if command is None else {"command": command}

        def go() -> None:
            if self.lost is not None:
                self.on_exit(table, rank, None, self.lost)
                return
            self.requests[request] = (table, rank)
            self._send("spawn", blob, **{Key.REQUEST: request}, **extra)

        self.runtime.call_soon(go)

    def kill(self, pid: int, sig: int = signal.SIGKILL) -> None:
        """Ask the worker to kill ``pid``; if it does not confirm in time, the
        process counts as gone (its host may be unreachable)."""

        def go() -> None:
            self._send("kill", None, **{Key.PID: pid, "sig": int(sig)})
            self.runtime.loop.call_later(KILL_CONFIRM, self._unconfirmed, pid)

        self.runtime.call_soon(go)

    def _unconfirmed(self, pid: int) -> None:
        request = self.pids.pop(pid, None)
        owner = self.requests.pop(request, None) if request is not None else None
        if owner is not None:
            self.on_exit(owner[0], owner[1], None, f"host {self.describe()} did not confirm a kill")

    def shutdown(self) -> None:
        """Tell the worker to stop its processes and exit (once it has
        answered the hello: a request before that could be lost with a
        connection that is retried)."""
        self.shutting_down = True
        self.ready.add_done_callback(lambda _: self.runtime.call_soon(self._send, "shutdown"))

    def describe(self) -> str:
        return (
            f"{self.hostname} ({self.address})" if self.hostname != self.address else self.address
        )

    # -- events, on the loop -------------------------------------------------------------

    def on_event(self, header: dict[str, Any], frames: Frames) -> None:
        self.last_seen = self.runtime.loop.time()
        op = header[Key.HOST_OP]
        if op == "hello":
            self.info = decode(frames)[1]  # type: ignore[assignment]
            self.hostname = self.info.get("hostname", self.address)
            if not self.ready.done():
                self.ready.set_result(self.info)
        elif op == "spawned":
            owner = self.requests.get(header[Key.REQUEST])
            if owner is not None:
                self.pids[header[Key.PID]] = header[Key.REQUEST]
                owner[0].pids[owner[1]] = header[Key.PID]
        elif op == "down":
            if not self.down.done():
                self.down.set_result(None)
        elif op == "exited":
            owner = self.requests.pop(header[Key.REQUEST], None)
            self.pids = {p: r for p, r in self.pids.items() if r != header[Key.REQUEST]}
            if owner is not None:
                why = decode(frames)[1]
                self.on_exit(owner[0], owner[1], header[Key.CODE], str(why or ""))

    def host_lost(self, reason: str, error: type[ConnectionError] = ConnectionError) -> None:
        """The host is gone: every process it ran is lost, with this reason
        (``error`` is what a wait for the worker's first answer raises)."""
        if self.lost is not None:
            return
        self.lost = f"host {self.describe()} was lost: {reason}"
        self.runtime.silent.add(self.address)
        if self.shutting_down:
            log.info("host %s shut down", self.describe())
        else:
            log.error("%s", self.lost)
        if not self.ready.done():
            self.ready.set_exception(error(self.lost))
        if not self.down.done():
            self.down.set_result(None)  # a worker gone is as good as shut down
        owners = list(self.requests.values())
        self.requests.clear()
        for pid in self.pids:  # should the host come back, its orphans end
            self._send("kill", None, **{Key.PID: pid, "sig": int(signal.SIGKILL)})
        self.pids.clear()
        for table, rank in owners:
            self.on_exit(table, rank, None, self.lost)

    def check(self, now: float) -> None:
        if self.lost is None and not self.ready.done() and now > self.attach_by:
            self.host_lost(
                f"no worker answered there within {attach_timeout():g} s ({ATTACH_TIMEOUT_ENV}); "
                "is its worker running and serving that address?"
            )
        if self.lost is None and self.ready.done() and now - self.last_seen > self.deadline:
            self.host_lost(
                f"silent for {now - self.last_seen:.1f} s (deadline {self.deadline:g} s, "
                f"{HOST_DEADLINE_ENV})"
            )


class RemoteAgents(dict[str, RemoteAgent]):
    """The workers this controller attached to, by address (a runtime service)."""

    def __init__(self, runtime: Runtime) -> None:
        super().__init__()
        self.runtime = runtime
        self.checking = False
        runtime.handle(Kind.HOST_EVENT, self._on_event)
        runtime.lost_hooks.append(self._lost)

    def attach(self, address: str, on_exit: OnExit) -> RemoteAgent:
        """The agent of the worker at ``address``, saying hello (on the loop)."""
        agent = self.get(address)
        if agent is None or agent.lost is not None:
            agent = self[address] = RemoteAgent(self.runtime, address, on_exit)
            agent.hello()
        if not self.checking:
            self.checking = True
            self.runtime.loop.call_later(1.0, self._check)
        return agent

    def _on_event(self, header: dict[str, Any], frames: Frames) -> None:
        agent = self.get(header[Key.ADDRESS])
        if agent is not None and agent.lost is None:
            agent.on_event(header, frames)

    def _lost(self, address: str, reason: str) -> None:
        agent = self.get(address)
        if agent is not None and not self.runtime.closing:
            agent.unreachable(reason)

    def _check(self) -> None:
        now = self.runtime.loop.time()
        for agent in list(self.values()):
            agent.check(now)
        if self.runtime.closing:
            self.checking = False
        else:
            self.runtime.loop.call_later(1.0, self._check)
