"""A worker's host agent, served to a controller on another host.

A worker (``run_worker_loop_forever``) is a runtime that listens at a known
address and answers ``Kind.HOST`` messages: a controller says hello, asks
for processes (each forked by this host's fork server, as on the
controller's own host), kills them, and finally shuts the worker down. The
worker tells the controller of every process it forked and every one that
exited (``Kind.HOST_EVENT``), and that it is alive, every ``BEAT`` seconds,
so a host that vanishes is noticed by its silence even when no connection
breaks. If a controller goes away, the processes it started here are
killed and the worker waits for the next one.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
from typing import Any

from monarch_transport import decode

from .._core.config import PRELOAD
from .._core.process import job_dir
from .._core.router import Frames, Runtime
from .._core.wire import Key, Kind
from .agent import ForkServer, HostAgent
from .gpus import host_gpus

__all__ = ["BEAT", "HostService", "host_event", "worker_preload"]

log = logging.getLogger("monarch.actor.worker")
BEAT = 1.0  # seconds between a worker's "alive" messages to its controllers


def host_event(op: str, worker: str, **fields: Any) -> dict[str, Any]:
    """The header of a worker's message to its controller about ``op``."""
    return {Key.KIND: Kind.HOST_EVENT, Key.HOST_OP: op, Key.ADDRESS: worker, **fields}


class _Started:
    """The processes one controller asked this worker for."""

    def __init__(self, controller: str, known_as: str) -> None:
        self.controller = controller
        self.known_as = known_as  # the address this controller dialed to reach this worker
        self.pids: dict[int, int] = {}  # request -> pid


class HostService:
    """This worker's answers to controllers (a runtime service)."""

    def __init__(
        self,
        runtime: Runtime,
        entry: str,
        advertise_host: str,
        server: ForkServer | None = None,
    ) -> None:
        self.runtime = runtime
        self.entry = entry
        self.advertise_host = advertise_host
        self.agent: HostAgent | None = None
        self.started: dict[str, _Started] = {}  # controller address -> its processes
        runtime.provide(self)
        runtime.handle(Kind.HOST, self._on_message)
        runtime.lost_hooks.append(self._lost)
        # the fork server starts with the worker, not at a controller's hello, so the
        # modules procs use (torch) are imported while no controller waits for them
        configured = PRELOAD.get().strip()
        self.follows_controllers = configured == "auto"
        self._agent(worker_preload(configured), server)  # given: started before the runtime

    # -- messages from controllers -------------------------------------------------------

    def _on_message(self, header: dict[str, Any], frames: Frames) -> None:
        op = header[Key.HOST_OP]
        controller = header[Key.OWNER]
        if op == "hello":
            first = controller not in self.started
            # answers name this worker as the controller knows it: a worker listening on
            # every interface (tcp://0.0.0.0:PORT) is reached by 127.0.0.1, a name, an
            # interface's address, and must answer under whichever was dialed
            known_as = str(header.get("worker") or self.runtime.address)
            self.started.setdefault(controller, _Started(controller, known_as)).known_as = known_as
            if self.follows_controllers:  # what this script imports, the procs will too
                self._agent().import_modules(str(header.get("preload") or ""))
            self._tell(controller, "hello", self._describe())
            if first:
                log.info("serving controller %s", controller)
                self._beat(controller)
        elif op == "spawn":
            started = self.started.setdefault(
                controller, _Started(controller, self.runtime.address)
            )
            blob: bytes = decode(frames)[1]  # type: ignore[assignment]
            command = header.get("command")
            self._agent().spawn_blob(started, header[Key.REQUEST], blob, command)
        elif op == "kill":
            known = self.started.get(controller)
            if known is not None and header[Key.PID] in known.pids.values():
                self._agent().kill(header[Key.PID], header.get("sig", signal.SIGKILL))
        elif op == "shutdown":
            log.info("controller %s shuts this host down", controller)
            known_as = self._known_as(controller)
            self._end(controller, "the controller shut the host down")
            self.runtime.send(controller, host_event("down", known_as), None)
            self.runtime.loop.create_task(self._stop())
        else:
            log.warning("dropped a host request of unknown kind %r from %s", op, controller)

    def _describe(self) -> dict[str, Any]:
        return {
            "hostname": socket.gethostname(),
            "ip": self.advertise_host,
            "free_port": _free_port(self.advertise_host),
            "gpus": host_gpus(),  # what the controller places GPU procs on
            "pid": os.getpid(),
        }

    def _agent(self, preload: str | None = None, server: ForkServer | None = None) -> HostAgent:
        if self.agent is None:
            self.agent = HostAgent(
                self.runtime, self._exited, self.entry, self._spawned, preload, server
            )
        return self.agent

    # -- what this host's fork server tells -----------------------------------------------

    def _spawned(self, started: _Started, request: int, pid: int) -> None:
        started.pids[request] = pid
        if self.started.get(started.controller) is not started:  # its controller left
            self._agent().kill(pid)
            return
        self._tell(started.controller, "spawned", None, request=request, pid=pid)

    def _exited(self, started: _Started, request: int, code: int, why: str) -> None:
        started.pids.pop(request, None)
        if self.started.get(started.controller) is started:
            self._tell(started.controller, "exited", why, request=request, code=code)

    def _tell(self, controller: str, op: str, payload: Any = None, **fields: Any) -> None:
        extra = {
            Key.REQUEST: fields.get("request"),
            Key.PID: fields.get("pid"),
            Key.CODE: fields.get("code"),
        }
        header = host_event(
            op, self._known_as(controller), **{k: v for k, v in extra.items() if v is not None}
        )
        self.runtime.send(controller, header, payload)

    def _known_as(self, controller: str) -> str:
        started = self.started.get(controller)
        return started.known_as if started is not None else self.runtime.address

    def _beat(self, controller: str) -> None:
        if controller in self.started and not self.runtime.closing:
            self.runtime.send(controller, host_event("alive", self._known_as(controller)), None)
            self.runtime.loop.call_later(BEAT, self._beat, controller)

    # -- controllers that leave ------------------------------------------------------------

    def _lost(self, address: str, reason: str) -> None:
        started = self.started.get(address)
        if started is not None and not self.runtime.closing:
            if started.pids:
                log.warning("controller %s is gone (%s): killing its processes", address, reason)
            else:
                log.info("controller %s left", address)
            self._end(address, reason)

    def _end(self, controller: str, reason: str) -> None:
        started = self.started.pop(controller, None)
        if started is None or self.agent is None:
            return
        for pid in list(started.pids.values()):
            self.agent.kill(pid)

    async def _stop(self) -> None:
        await self.runtime.flush(2.0)
        self.runtime.stopped.set()

    def close(self) -> None:
        """Kill whatever still runs here and stop the fork server."""
        for controller in list(self.started):
            self._end(controller, "the worker is stopping")
        if self.agent is not None:
            self.agent.close()
            # the job's folder is this worker's: a worker ends with os._exit, past atexit
            shutil.rmtree(job_dir(), ignore_errors=True)


def worker_preload(configured: str) -> str:
    """What a worker's fork server imports when it starts, for the ``preload``
    setting ``configured``: ``auto`` is nothing yet (the scripts that will
    use this worker are not known; each one's own ``auto`` list is imported
    when it attaches), ``none`` nothing, else the list. Importing torch
    unasked would cost every host seconds of CPU and every proc its pages,
    for scripts that may never use it: ``MONARCH_PRELOAD=torch`` on the
    worker asks for it at once."""
    return "" if configured in ("auto", "none") else configured


def _free_port(host: str) -> int:
    """A TCP port free on this host now (for ``MASTER_PORT``)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        try:
            s.bind((host, 0))
        except OSError:
            s.bind(("", 0))
        return int(s.getsockname()[1])
