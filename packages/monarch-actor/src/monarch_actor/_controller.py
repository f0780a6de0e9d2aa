"""Owning proc meshes: starting processes through the host agent, learning
their addresses, stopping and reaping them; and the handlers every runtime
installs for the messages that are not actor calls."""

from __future__ import annotations

import atexit
import concurrent.futures
import contextlib
import logging
import socket
import sys
import threading
import time
import uuid
from typing import Any

from monarch_mesh import Shape
from monarch_transport import decode

from ._config import cleanup_timeout
from ._future import Future
from ._host_agent import agents
from ._lifecycle import ProcExited, emit
from ._runtime import Frames, Runtime, get_runtime, maybe_runtime, stop_controller_loop
from ._singletons import install_singletons

__all__ = [
    "install_controller",
    "install_proc_handlers",
    "spawn_procs",
    "stop_procs",
]

log = logging.getLogger("monarch.actor.controller")
STOP_TIMEOUT = 10.0  # seconds procs get to stop before they are killed


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spawn_procs(
    host: Any,
    shape: Shape,
    per_host: dict[str, int],
    bootstrap: Any,
    name: str,
    proc_bind: list[dict[str, str]] | None = None,
) -> Any:
    from ._mesh import ProcMesh, ProcTable

    runtime = get_runtime()
    agent = host._agents[0]()
    size = len(shape)
    table = ProcTable(f"{name}-{uuid.uuid4().hex[:12]}", name, size)
    table.owned = True
    tables(runtime)[table.id] = table
    procs = ProcMesh(table, shape, host)
    runtime.supervision.adopt(procs, "proc")
    beat_every = runtime.supervision.monitor.interval
    local = 1
    for value in per_host.values():
        local *= value
    master_port = _free_port()
    for rank in range(size):
        env = {
            "RANK": str(rank),
            "WORLD_SIZE": str(size),
            "LOCAL_RANK": str(rank % local),
            "LOCAL_WORLD_SIZE": str(local),
            "GROUP_RANK": str(rank // local),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(master_port),
            "HYPERACTOR_PROCESS_NAME": f"{name}-{rank}",
        }
        info = {
            "env": env,
            "owner": runtime.address,
            "mesh": table.id,
            "rank": rank,
            "bootstrap": bootstrap,
            "bind": proc_bind[rank % local] if proc_bind else None,
            "argv0": sys.argv[0] if sys.argv else "",
            "root": runtime.root,
            "heartbeat": beat_every,
        }
        agent.spawn(table, rank, info)
    return procs


def tables(runtime: Runtime) -> dict[str, Any]:
    return runtime.tables


def proc_ready(runtime: Runtime, header: dict[str, Any], frames: Frames) -> None:
    table = tables(runtime).get(header["mesh"])
    if table is None:
        return
    table.addresses[header["rank"]] = header["addr"]
    if table.owned:
        runtime.supervision.watch(table, header["rank"])
    if all(table.addresses):
        announce = {"k": "t", "mesh": table.id, "name": table.name}
        for address in table.addresses:
            runtime.send(address, announce, list(table.addresses))
        table.mark_ready()


def proc_exited(runtime: Runtime, table: Any, rank: int, code: int) -> None:
    address = table.addresses[rank]
    table.pids.pop(rank, None)
    expected = rank in table.stopping
    emit(ProcExited(table.id, rank, code, expected=expected))
    table.notify_exits()
    reason = runtime.supervision.exit_reason(table, rank, code)
    if not expected:
        log.error("process %s-%s: %s", table.name, rank, reason)
        if not table.ready:
            table.failure = reason
            table.mark_ready()
        if address:
            runtime.peer_lost(address, reason)
            outbox = runtime.outboxes.get(address)
            if outbox is not None:
                outbox.fail(reason)
    runtime.supervision.proc_exited(table, rank, reason, expected)


def when_started(table: Any) -> Future[bool]:
    started: concurrent.futures.Future[bool] = concurrent.futures.Future()

    def check() -> None:
        if table.failure is not None:
            started.set_exception(
                RuntimeError(f"proc mesh {table.name} failed to start: {table.failure}")
            )
        else:
            started.set_result(True)

    get_runtime().call_soon(table.when_ready, check)
    return Future._of(started)


def stop_procs(mesh: Any, reason: str) -> Future[None]:
    """Ask each process of ``mesh`` to stop its actors and exit; the future
    resolves once all have exited (killed after STOP_TIMEOUT)."""
    from ._endpoint import _Gather

    runtime = get_runtime()
    table = mesh._table
    done: concurrent.futures.Future[None] = concurrent.futures.Future()
    ranks = list(mesh._shape.ndslice)

    if len(set(ranks)) == table.size:
        runtime.supervision.stopping_procs(table, reason)

    def go() -> None:
        table.stopping.update(ranks)
        # only processes that started and still run can answer
        addresses = [
            address
            for rank in ranks
            if (address := table.addresses[rank]) and (not table.owned or rank in table.pids)
        ]
        if not addresses:
            reaped()
            return
        gather = _Gather(runtime, len(addresses), "all", _line(len(addresses)))
        port = gather.open(addresses)
        for position, address in enumerate(addresses):
            runtime.send(address, {"k": "q", "p": port, "r": position, "why": reason}, None)
        gather.result.add_done_callback(lambda _: runtime.call_soon(reaped))
        runtime.loop.call_later(STOP_TIMEOUT, kill_left)

    def reaped() -> None:
        if table.owned:
            table.when_exited(ranks, lambda: _settle(done))
        else:  # a mesh another process owns: its answers are all we get
            _settle(done)

    def kill_left() -> None:
        agent = agents.get(runtime.address)
        if agent is not None and not done.done():
            for rank in ranks:
                pid = table.pids.get(rank)
                if pid is not None:
                    agent.kill(pid)

    runtime.call_soon(table.when_ready, go)
    return Future._of(done)


def _line(size: int) -> Shape:
    from monarch_mesh import Slice

    return Shape(["rank"], Slice.new_row_major([size]))


def _settle(done: concurrent.futures.Future[None]) -> None:
    if not done.done():
        done.set_result(None)


def shutdown_host(host: Any) -> Future[None]:
    """Stop every process this host's agent started for this script, and the agent."""
    return shutdown_context()


async def set_logging(mesh: Any, stream: bool, window: int | None, level: int) -> None:
    from ._logs import configure_streaming

    await configure_streaming(mesh, stream, window, level)


# -- handlers ---------------------------------------------------------------------------


def install_controller(runtime: Runtime) -> None:
    runtime.handlers["r"] = lambda h, f: proc_ready(runtime, h, f)
    runtime.handlers["l"] = _log_handler()
    install_singletons(runtime)
    atexit.register(_shutdown_at_exit)


def _log_handler() -> Any:
    def handle(header: dict[str, Any], frames: Frames) -> None:
        from ._logs import show_lines

        show_lines(header, decode(frames)[1])

    return handle


def install_proc_handlers(runtime: Runtime, owner: str) -> None:
    from ._mesh import table_for

    runtime.handlers["r"] = lambda h, f: proc_ready(runtime, h, f)
    runtime.handlers["l"] = lambda h, f: runtime.post(owner, f)

    def announce(header: dict[str, Any], frames: Frames) -> None:
        addresses: Any = decode(frames)[1]
        table_for(header["mesh"], header["name"], addresses)

    def stop(header: dict[str, Any], frames: Frames) -> None:
        runtime.loop.create_task(_stop_proc(runtime, header))

    runtime.handlers["t"] = announce
    runtime.handlers["q"] = stop
    runtime.handlers["g"] = lambda h, f: _set_log_forwarding(h, f)
    runtime.lost_hooks.append(lambda address, reason: _owner_lost(runtime, owner, address))


def _set_log_forwarding(header: dict[str, Any], frames: Frames) -> None:
    from ._logs import set_forwarding

    set_forwarding(decode(frames)[1])  # type: ignore[arg-type]


def _owner_lost(runtime: Runtime, owner: str, address: str) -> None:
    if address == owner and not runtime.closing:
        log.warning("the owner of this process (%s) is gone; exiting", owner)
        runtime.stopped.set()


async def _stop_proc(runtime: Runtime, header: dict[str, Any]) -> None:
    """Stop every actor here (their ``__cleanup__`` runs), answer, then exit."""
    import asyncio

    from monarch_mesh import Slice

    from ._endpoint import _Gather

    hosts = list(runtime.actors.values())
    if hosts:
        gather = _Gather(
            runtime, len(hosts), "all", Shape(["actor"], Slice.new_row_major([len(hosts)]))
        )
        reply_to = gather.open([runtime.address] * len(hosts))
        for position, host in enumerate(hosts):
            host.post(
                {
                    "k": "c",
                    "op": "stop",
                    "a": host.key,
                    "n": host.name,
                    "p": reply_to,
                    "b": [position, position + 1],
                },
                [],
            )
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.wrap_future(gather.result), STOP_TIMEOUT - 2)
    port = header.get("p")
    if port is not None:
        runtime.send(port[0], {"k": "p", "pid": port[1], "r": header.get("r", 0)}, None)
    await runtime.flush(2.0)
    runtime.stopped.set()


def shutdown_context() -> Future[None]:
    """Stop every proc mesh this process started (as happens at exit)."""
    done: concurrent.futures.Future[None] = concurrent.futures.Future()

    def run() -> None:
        _stop_everything()
        done.set_result(None)

    threading.Thread(target=run, daemon=True, name="monarch-shutdown").start()
    return Future._of(done)


def _shutdown_at_exit() -> None:
    runtime = maybe_runtime()
    if runtime is None or runtime.role != "controller":
        return
    _stop_everything()
    _stop_local_actors(runtime)
    stop_controller_loop(runtime, 3.0)


def _stop_local_actors(runtime: Runtime) -> None:
    """Stop the actors living in the controller's own process (their
    ``__cleanup__`` runs) and wait for their threads, within the cleanup timeout."""
    hosts = list(runtime.actors.values())
    for host in hosts:
        runtime.call_soon(
            host.post, {"k": "c", "op": "stop", "a": host.key, "n": host.name, "b": [0, 1]}, []
        )
    deadline = time.monotonic() + cleanup_timeout() + 1.0
    for host in hosts:
        host.thread.join(max(0.0, deadline - time.monotonic()))


def _stop_everything() -> None:
    runtime = maybe_runtime()
    if runtime is None:
        return
    from ._mesh import ProcMesh

    futures = []
    for table in list(tables(runtime).values()):
        if table.owned and not table.stopped and table.ready:
            futures.append(stop_procs(ProcMesh(table, _line(table.size)), "the controller exited"))
    for future in futures:
        with contextlib.suppress(Exception):
            future.get(STOP_TIMEOUT + 2)
    for address in list(agents):
        agents.pop(address).close()
