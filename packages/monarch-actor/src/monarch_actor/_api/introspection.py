"""What a process is doing, for the mesh admin: its actors (counters, the
handler running now, recent events), the proc meshes it started, its Python
stacks, and a ping. Every process answers ``Kind.INSPECT`` requests; the
controller asks (``inspect_process``)."""

from __future__ import annotations

import concurrent.futures
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import traceback
from typing import Any, cast

from monarch_transport import decode

from .._core.config import pyspy_bin
from .._core.future import Future
from .._core.ports import PortReceiver
from .._core.process import get_runtime
from .._core.router import Frames, Runtime
from .._core.wire import Key, Kind, port_header
from .._procs.table import ProcTable, ProcTables
from .local_actors import LocalActors

__all__ = ["Introspection", "inspect_process"]

WHAT = ("snapshot", "stacks", "ping")
PYSPY_TIMEOUT = 20.0  # seconds a py-spy dump may take


class Introspection:
    """Answers ``Kind.INSPECT`` requests about this process (a runtime service)."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.started_at = time.time()
        runtime.provide(self)
        runtime.handle(Kind.INSPECT, self._on_request)

    def answer(self, what: str, options: dict[str, Any]) -> Any:
        """The answer to one request (``stacks`` takes a while: not on the loop)."""
        if what == "ping":
            return {"at": time.time(), "pid": os.getpid()}
        if what == "snapshot":
            return self.snapshot(events=bool(options.get("events")))
        if what == "stacks":
            return stacks()
        raise ValueError(f"unknown inspection {what!r}: ask for one of {', '.join(WHAT)}")

    def snapshot(self, *, events: bool = False) -> dict[str, Any]:
        """This process, its actors and the proc meshes it started, as plain data."""
        runtime = self.runtime
        actors = runtime.get(LocalActors)
        return {
            "address": runtime.address,
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "name": os.environ.get("HYPERACTOR_PROCESS_NAME") or runtime.role,
            "kind": runtime.role,
            "started_at": self.started_at,
            "actors": [
                _actor(host, events) for host in list(actors.hosts.values()) if _is_actor(host)
            ],
            "proc_meshes": [
                _table(table)
                for table in list(runtime.get(ProcTables).values())
                if table.owned and not table.stopped  # a stopped mesh is gone, not failed
            ],
        }

    def _on_request(self, header: dict[str, Any], frames: Frames) -> None:
        address, pid = header[Key.REPLY_TO]
        try:
            what, options = cast(tuple[str, dict[str, Any]], decode(frames)[1])
            if what not in WHAT:
                raise ValueError(f"unknown inspection {what!r}: ask for one of {', '.join(WHAT)}")
        except Exception as error:
            self.runtime.send(address, port_header(pid, failed=True), error)
            return
        if what != "stacks":
            self._reply(address, pid, what, options)
            return
        reply = threading.Thread(
            target=self._reply, args=(address, pid, what, options), daemon=True
        )
        reply.name = "monarch-stacks"
        reply.start()

    def _reply(self, address: str, pid: int, what: str, options: dict[str, Any]) -> None:
        try:
            answer = self.answer(what, options)
        except Exception as error:
            self.runtime.send(address, port_header(pid, failed=True), error)
        else:
            self.runtime.send(address, port_header(pid), answer)


def _is_actor(host: Any) -> bool:
    return hasattr(host, "stats")


def _actor(host: Any, events: bool) -> dict[str, Any]:
    if host.failure is not None:
        status, reason = "failed", host.failure
    elif host.stopped is not None:
        status, reason = "stopped", host.stopped
    elif host.stats.current:
        status, reason = "busy", ""
    else:
        status, reason = "idle", ""
    instance = host.instance
    queue = host.mailbox if host.is_async else host.inbox
    return {
        "key": host.key,
        "name": host.name,
        "class": type(instance).__qualname__ if instance is not None else "",
        "rank": host.rank.rank,
        "point": dict(host.rank.items()) if hasattr(host.rank, "items") else {},
        "status": status,
        "reason": reason,
        "mailbox": queue.qsize(),
        **host.stats.as_dict(events=events),
    }


def _table(table: ProcTable) -> dict[str, Any]:
    procs = []
    for rank in range(table.size):
        if rank in table.stopping:
            status = "stopped"
        elif table.failure is not None and rank not in table.pids:
            status = "failed"
        elif rank in table.pids:
            status = "running"
        else:
            status = "starting" if not table.ready else "exited"
        procs.append(
            {
                "rank": rank,
                "address": table.addresses[rank] if rank < len(table.addresses) else None,
                "pid": table.pids.get(rank),
                "host": table.host_of(rank),
                "status": status,
            }
        )
    return {
        "id": table.id,
        "name": table.name,
        "size": table.size,
        "failure": table.failure,
        "procs": procs,
    }


def stacks() -> dict[str, Any]:
    """This process's Python stacks: from py-spy when it is installed and may
    attach, else from the interpreter's own frames."""
    pyspy = pyspy_bin() or shutil.which("py-spy")
    problem = "py-spy is not installed (pip install py-spy)"
    if pyspy:
        try:
            done = subprocess.run(
                [pyspy, "dump", "--pid", str(os.getpid())],
                capture_output=True,
                text=True,
                timeout=PYSPY_TIMEOUT,
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            problem = f"py-spy failed: {error}"
        else:
            if done.returncode == 0:
                return {"source": "py-spy", "text": done.stdout}
            problem = f"py-spy failed: {(done.stderr or done.stdout).strip()[:500]}"
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    parts = []
    for ident, frame in sys._current_frames().items():
        parts.append(f"Thread {ident} ({names.get(ident, '?')}):\n")
        parts.extend(traceback.format_stack(frame))
    return {"source": "python", "note": problem, "text": "".join(parts)}


def inspect_process(address: str, what: str, **options: Any) -> Future[Any]:
    """Ask the process listening at ``address`` what it is doing.

    Args:
        address: the process's runtime address (this process's own is answered here).
        what: ``"snapshot"`` (its actors and the proc meshes it started; with
            ``events=True`` each actor's recent events too), ``"stacks"`` (its
            Python stacks) or ``"ping"``.
        options: for ``snapshot``: ``events``.

    Returns:
        A ``Future`` of the answer, as plain data. It fails when the process is
        gone (like any call to it) or ``what`` is unknown.
    """
    runtime = get_runtime()
    if address == runtime.address:
        here: concurrent.futures.Future[Any] = concurrent.futures.Future()
        try:
            here.set_result(runtime.get(Introspection).answer(what, options))
        except Exception as error:
            here.set_exception(error)
        return Future._of(here)
    receiver: PortReceiver[Any] = PortReceiver(once=True)
    reply = [receiver.port._address, receiver.port._pid]
    runtime.send(address, {Key.KIND: Kind.INSPECT, Key.REPLY_TO: reply}, (what, options))
    return receiver.recv()
