"""Proc meshes from their owner's side: starting processes through the host
agent, learning their addresses, stopping and reaping them; and a proc's
side of being stopped."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import socket
import sys
import threading
import time
from typing import Any

import monarch_config
from monarch_transport import DecodeError, decode

from .._core.config import SHARE_GPUS, cleanup_timeout
from .._core.future import Future
from .._core.gather import Gather
from .._core.lifecycle import ProcExited, emit
from .._core.process import get_runtime, maybe_runtime
from .._core.progress import progress, shows_progress
from .._core.reply import Reply, to_asyncio
from .._core.router import Frames, Runtime
from .._core.threads import background_thread, run_in_thread
from .._core.wire import Key, Kind, port_header
from .._procs.agent import HostAgent, agents, local_agent
from .._procs.bootstrap import BootstrapCommand
from .._procs.gpus import GpuPlacementError, host_gpus, place_on_gpus
from .._procs.logs import drain_output, flush_lines, set_log_mode
from .._procs.remote import RemoteAgent, RemoteAgents
from .._procs.table import ProcTable, ProcTables, table_for
from .._supervision.supervise import Supervision
from .local_actors import Hosted, LocalActors

__all__ = [
    "PROC_ENTRY",
    "check_gpu_placement",
    "host_agent",
    "host_command",
    "install_proc_handlers",
    "install_ready_handler",
    "on_worker_exit",
    "remote_agents",
    "set_host_command",
    "start_procs",
    "stop_everything",
    "stop_procs",
    "when_started",
    "worker_agent",
]

log = logging.getLogger("monarch.actor.controller")
STOP_TIMEOUT = 10.0  # seconds procs get to stop before they are killed
PROC_ENTRY = "monarch_actor._boot:proc_main"  # what each forked proc runs


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def host_agent() -> HostAgent:
    """This process's host agent (started on first use)."""
    runtime = get_runtime()
    return local_agent(lambda *exit: proc_exited(runtime, *exit), PROC_ENTRY)


def worker_agent(address: str) -> RemoteAgent:
    """The agent of the worker at ``address``, attached on first use (a host
    mesh received from another process reaches its workers this way)."""
    runtime = get_runtime()
    registry = runtime.run_sync(remote_agents, runtime)
    agent: RemoteAgent = runtime.run_sync(registry.attach, address, on_worker_exit(runtime))
    return agent


def remote_agents(runtime: Runtime) -> RemoteAgents:
    """The workers this process attached to (made on first use; on the loop)."""
    found = runtime.services.get(RemoteAgents)
    return found if found is not None else runtime.provide(RemoteAgents(runtime))


def on_worker_exit(runtime: Runtime) -> Any:
    """What a worker's report of an exited (or lost) process does here."""
    return lambda table, rank, code, why: proc_exited(runtime, table, rank, code, why)


_host_command: list[BootstrapCommand | None] = [None]  # this proc's host mesh's command


def set_host_command(command: BootstrapCommand | None) -> None:
    """In a proc: the bootstrap command its host mesh launches processes with
    (``HostMesh.with_python_executable``), which its ``this_host()`` keeps."""
    _host_command[0] = command


def host_command() -> BootstrapCommand | None:
    """The bootstrap command ``this_host()`` launches processes with here (``None``: forked)."""
    return _host_command[0]


LARGE_MESH = 16  # procs: a mesh this large shows its start on the terminal


def _show_start(table: ProcTable) -> None:
    """A progress line while a large mesh's processes start (they report in
    on the loop; this only looks)."""
    with progress(f"starting proc mesh {table.name!r}", total=table.size) as line:
        while not table.ready_event.wait(0.1) and table.failure is None:
            line.update(completed=sum(a is not None for a in table.addresses))


def start_procs(
    hosts: list[Any],
    table: ProcTable,
    per_host: dict[str, int],
    bootstrap: Any,
    proc_bind: list[dict[str, str]] | None = None,
    commands: list[dict[str, Any] | None] | None = None,
    host_command: BootstrapCommand | None = None,
) -> None:
    """Ask each host's agent (``hosts[i]``, a ``HostAgent`` here or a
    ``RemoteAgent`` on another host) for its processes of ``table``; they
    tell us when they listen. Returns at once.

    ``commands[rank]`` (a ``command_spec``) is the bootstrap command that
    launches that process (``None``: forked as it is); ``host_command`` is
    what the processes' own ``this_host()`` launches theirs with."""
    runtime = get_runtime()
    table.owned = True
    table.hostname = socket.gethostname()
    runtime.get(ProcTables)[table.id] = table
    if table.size >= LARGE_MESH and shows_progress():
        background_thread("monarch-start-progress", _show_start, table).start()
    beat_every = Supervision.of(runtime).monitor.interval
    local = 1
    for value in per_host.values():
        local *= value

    def go() -> None:
        try:
            placed = _gpu_environments(hosts, per_host, table.name)
        except GpuPlacementError as error:
            table.failure = str(error)
            table.mark_ready()
            return
        master_addr, master_port = _master(hosts[0])
        for rank in range(table.size):
            agent = hosts[rank // local]
            table.agents[rank] = agent
            table.hosts[rank] = agent.hostname
            env = {
                **placed[rank // local][rank % local],
                "RANK": str(rank),
                "WORLD_SIZE": str(table.size),
                "LOCAL_RANK": str(rank % local),
                "LOCAL_WORLD_SIZE": str(local),
                "GROUP_RANK": str(rank // local),
                "GROUP_WORLD_SIZE": str(len(hosts)),
                "MASTER_ADDR": master_addr,
                "MASTER_PORT": str(master_port),
                "HYPERACTOR_PROCESS_NAME": f"{table.name}-{rank}",
            }
            info = {
                "env": env,
                "owner": runtime.address,
                "mesh": table.id,
                "rank": rank,
                "bootstrap": bootstrap,
                "bind": proc_bind[rank % local] if proc_bind else None,
                "argv0": sys.argv[0] if sys.argv else "",
                "path": list(sys.path),
                "root": runtime.root,
                "heartbeat": beat_every,
                "config": monarch_config.runtime_values(),  # what configure() set here
                "host_command": host_command,
            }
            agent.spawn(table, rank, info, commands[rank] if commands else None)

    remote = [agent.ready for agent in hosts if isinstance(agent, RemoteAgent)]
    if not remote:
        go()
        return
    left = [len(remote)]

    def one_ready(_: object) -> None:
        left[0] -= 1
        if left[0] == 0:
            runtime.call_soon(go)

    for ready in remote:
        ready.add_done_callback(one_ready)


def _gpus_of(agent: Any) -> list[str] | None:
    """The GPUs of ``agent``'s host, or None while a worker has not said."""
    if isinstance(agent, RemoteAgent):
        if not agent.ready.done() or agent.ready.exception():
            return None
        return list(agent.ready.result().get("gpus") or [])
    return host_gpus()


def _gpu_environments(
    hosts: list[Any], per_host: dict[str, int], mesh: str
) -> list[list[dict[str, str]]]:
    """Per host, per process on it, the environment that places it on its GPU."""
    share = SHARE_GPUS.get()
    return [
        place_on_gpus(
            per_host,
            _gpus_of(agent) or [],
            share=share,
            mesh=mesh,
            host=agent.hostname,
            host_index=index,
        )
        for index, agent in enumerate(hosts)
    ]


def check_gpu_placement(hosts: list[Any], per_host: dict[str, int], mesh: str) -> None:
    """Refuse now, before anything starts, a mesh that asks a host for more
    processes along a GPU dimension than it has GPUs (hosts whose workers
    have not reported yet are checked when they do: the mesh then fails to
    start, saying the same).

    Raises:
        GpuPlacementError: a host has too few GPUs (a ``ValueError``).
    """
    known = [agent for agent in hosts if _gpus_of(agent) is not None]
    _gpu_environments(known, per_host, mesh)


def _master(agent: Any) -> tuple[str, int]:
    """Where rank 0's host is reached, and a port free there (torch.distributed's rendezvous)."""
    if isinstance(agent, RemoteAgent) and agent.ready.done() and not agent.ready.exception():
        info = agent.ready.result()
        return str(info.get("ip") or "127.0.0.1"), int(info.get("free_port") or 29500)
    return "127.0.0.1", _free_port()


def _proc_ready(runtime: Runtime, header: dict[str, Any], frames: Frames) -> None:
    table = runtime.get(ProcTables).get(header[Key.MESH])
    if table is None:
        return
    rank = header[Key.RANK]
    runtime.new_peer(header[Key.ADDRESS])  # before it is this rank's: a reused port's past goes
    table.addresses[rank] = header[Key.ADDRESS]
    with contextlib.suppress(DecodeError):
        setup_error = decode(frames)[1]  # its bootstrap raised: `initialized` raises this
        if isinstance(setup_error, Exception) and table.setup_error is None:
            table.setup_error = setup_error
    if table.owned:
        Supervision.of(runtime).watch(table, rank)
    if all(table.addresses):
        announce = {Key.KIND: Kind.TABLE, Key.MESH: table.id, Key.NAME: table.name}
        addresses = [a or "" for a in table.addresses]
        for address in addresses:
            runtime.send(address, announce, addresses)
        table.mark_ready()


def proc_exited(runtime: Runtime, table: ProcTable, rank: int, code: int | None, why: str) -> None:
    """The host agent saw process ``rank`` of ``table`` exit (on the loop);
    ``code`` None: it was lost with its host, ``why`` says how."""
    address = table.addresses[rank]
    pid = table.pids.pop(rank, None)
    expected = rank in table.stopping
    emit(ProcExited(table.id, rank, -1 if code is None else code, expected=expected))
    table.notify_exits()
    supervision = Supervision.of(runtime)
    where = f"process {table.name}-{rank}, pid {pid}, host {table.host_of(rank)}"
    if code is None:
        reason = f"the process was lost with its host ({where}): {why}"
    else:
        reason = supervision.exit_reason(table, rank, code, where)
        if why:
            reason = f"{reason}; its last words:\n{why.rstrip()}"
    if not expected:
        # whoever must hear of it does (a caller, an owner, the fault hook), in these words
        log.info("%s", reason)
        if not table.ready:
            table.failure = reason
            table.mark_ready()
    if address and (not expected or code is None):
        # it will never answer: a call waits no more, nor a stop it was asked
        # before its host was declared lost (a silent host answers nothing)
        runtime.peer_gone(address, reason)
    supervision.proc_exited(table, rank, reason, expected)


def when_started(table: ProcTable) -> Future[bool]:
    started: concurrent.futures.Future[bool] = concurrent.futures.Future()

    def check() -> None:
        if table.setup_error is not None:
            started.set_exception(table.setup_error)
        elif table.failure is not None:
            started.set_exception(
                RuntimeError(f"proc mesh {table.name} failed to start: {table.failure}")
            )
        else:
            started.set_result(True)

    get_runtime().call_soon(table.when_ready, check)
    return Future._of(started)


def stop_procs(
    table: ProcTable,
    ranks: list[int],
    reason: str,
    timeout: float = STOP_TIMEOUT,
    leave_busy: bool = False,
) -> Future[None]:
    """Ask each process of ``ranks`` to stop its actors and exit; the future
    resolves once all have exited (killed after ``timeout`` seconds). With
    ``leave_busy`` (this process exits) they do not wait for actors busy in a
    message."""
    runtime = get_runtime()
    done: concurrent.futures.Future[None] = concurrent.futures.Future()

    if len(set(ranks)) == table.size:
        Supervision.of(runtime).stopping_procs(table, reason)

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
        gather = Gather(runtime, len(addresses), "all")
        port = gather.open(addresses)
        for position, address in enumerate(addresses):
            stop = {Key.KIND: Kind.STOP_PROC, Key.REPLY_TO: port, Key.RANK: position}
            if leave_busy:
                stop[Key.LEAVE_BUSY] = 1
            runtime.send(address, {**stop, Key.WHY: reason}, None)
        gather.result.add_done_callback(lambda _: runtime.call_soon(reaped))
        runtime.loop.call_later(timeout, kill_left)

    def reaped() -> None:
        if table.owned:
            table.when_exited(ranks, lambda: _settle(done))
        else:  # a mesh another process owns: its answers are all we get
            _settle(done)

    def kill_left() -> None:
        if done.done():
            return
        for rank in ranks:
            agent, pid = table.agents.get(rank), table.pids.get(rank)
            if agent is not None and pid is not None:
                agent.kill(pid)

    runtime.call_soon(table.when_ready, go)
    return Future._of(done)


def _settle(done: concurrent.futures.Future[None]) -> None:
    if not done.done():
        flush_lines()  # what the stopped procs said last is shown before stop() returns
        done.set_result(None)


# -- handlers ---------------------------------------------------------------------------


def install_ready_handler(runtime: Runtime) -> None:
    """Procs started here report where they listen (controller and procs alike)."""
    runtime.handle(Kind.READY, lambda h, f: _proc_ready(runtime, h, f))


def install_proc_handlers(runtime: Runtime, owner: str) -> None:
    """What a proc does for its owner: forward output, learn mesh tables, stop."""
    install_ready_handler(runtime)
    runtime.handle(Kind.LOGS, lambda h, f: runtime.post(owner, f))

    def announce(header: dict[str, Any], frames: Frames) -> None:
        addresses: Any = decode(frames)[1]
        table_for(header[Key.MESH], header[Key.NAME], addresses)

    def stop(header: dict[str, Any], frames: Frames) -> None:
        runtime.loop.create_task(_stop_proc(runtime, header))

    runtime.handle(Kind.TABLE, announce)
    runtime.handle(Kind.STOP_PROC, stop)
    runtime.handle(Kind.LOG_MODE, lambda h, f: set_log_mode(decode(f)[1]))
    runtime.lost_hooks.append(lambda address, reason: _owner_lost(runtime, owner, address))


def _owner_lost(runtime: Runtime, owner: str, address: str) -> None:
    if address == owner and not runtime.closing:
        # info, not a warning: a script killed with a mesh of 256 procs would
        # print 256 of these lines; its end is news to nobody
        log.info("the owner of this process (%s) is gone; exiting", owner)
        runtime.stopped.set()


async def _stop_proc(runtime: Runtime, header: dict[str, Any]) -> None:
    """Stop every actor here (their ``__cleanup__`` runs), answer, then exit."""
    actors = runtime.get(LocalActors)
    awaited = actors.idle() if Key.LEAVE_BUSY in header else None
    stopped = actors.stop_all(header.get(Key.WHY) or "stopped by client", awaited)
    with contextlib.suppress(Exception):
        await asyncio.wait_for(to_asyncio(stopped, runtime.loop), STOP_TIMEOUT - 2)
    await drain_output()  # its last lines reach the owner before the answer
    port = header.get(Key.REPLY_TO)
    if port is not None:
        runtime.send(port[0], port_header(port[1], header.get(Key.RANK, 0)), None)
    await runtime.flush(2.0)
    runtime.stopped.set()


def stop_local_actors(runtime: Runtime) -> None:
    """Stop the actors living in the controller's own process as it exits
    (their ``__cleanup__`` runs) and wait for their threads, within the
    cleanup timeout; an actor busy in a message is not waited for."""
    actors = runtime.get(LocalActors)
    deadline = time.monotonic() + cleanup_timeout() + 1.0

    def stop() -> tuple[list[Hosted], Reply[Any]]:
        idle = actors.idle()
        return idle, actors.stop_all("the controller exited", idle)

    with contextlib.suppress(Exception):
        idle, stopped = runtime.run_sync(stop)
        stopped.result(max(0.0, deadline - time.monotonic()))
        for host in idle:
            host.join(max(0.0, deadline - time.monotonic()))


_shutdown_claimed = threading.Lock()


def shutdown_context(host_timeout: float | None = None) -> Future[None]:
    """Stop every proc mesh this process started, as happens at exit.

    The first call starts the shutdown and returns a future that resolves when
    it is done; later calls return an already resolved future (they do not wait
    for the first). The controller program itself goes on running.

    Args:
        host_timeout: seconds each process gets to stop its actors and exit
            before it is killed (default 10); finite and not negative.

    Returns:
        A future resolved when the processes have exited.

    Raises:
        ValueError: ``host_timeout`` is negative, infinite or not a number;
            shutdown is then not started.
    """
    timeout = STOP_TIMEOUT if host_timeout is None else float(host_timeout)
    if not (0.0 <= timeout < float("inf")):
        raise ValueError(
            "shutdown_context: host_timeout must be a finite number of seconds >= 0, "
            f"got {host_timeout!r}"
        )
    done: concurrent.futures.Future[None] = concurrent.futures.Future()
    if maybe_runtime() is None or not _shutdown_claimed.acquire(blocking=False):
        done.set_result(None)
        return Future._of(done)
    return Future._of(run_in_thread("monarch-shutdown", stop_everything, timeout, leave_busy=False))


def _stopping_unstarted(runtime: Runtime, table: ProcTable, reason: str) -> None:
    table.stopping.update(range(table.size))
    Supervision.of(runtime).stopping_procs(table, reason)


def stop_everything(timeout: float = STOP_TIMEOUT, leave_busy: bool = True) -> None:
    """Stop every proc mesh this process started, and its host agents (each
    process is killed after ``timeout`` seconds). Unless ``leave_busy`` is
    False, as this process exits, actors busy in a message are not waited
    for: their processes end once the others have stopped."""
    runtime = maybe_runtime()
    if runtime is None:
        return
    reason = "the controller exited"
    futures = []
    for table in list(runtime.get(ProcTables).values()):
        if not table.owned or table.stopped:
            continue
        if table.ready:
            futures.append(stop_procs(table, list(range(table.size)), reason, timeout, leave_busy))
        else:  # still starting: the agent ends them below, and that is no failure
            runtime.run_sync(_stopping_unstarted, runtime, table, reason)
    for future in futures:
        with contextlib.suppress(Exception):
            future.get(timeout + 2)
    for pid in list(agents):
        agents.pop(pid).close()
