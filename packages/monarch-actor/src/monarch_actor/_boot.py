"""The composition root: the one place that wires the layers into a running
process. The controller's runtime starts here on first use (a plain script
never calls anything to get one); a proc forked by the host agent runs
``proc_main``. Every other module only registers what it owns on the
runtime it is given.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import inspect
import os
import pickle
import socket
import sys
import threading
from typing import Any, cast

import monarch_config
from monarch_transport import Address, decode, listen, new_event_loop, prefer_backend

from ._api.actor_host import ActorHost, setup_failure
from ._api.hosts import (
    TRUST_ALL,
    attached,
    check_listener,
    configure_security,
    preload_sealing,
    split_alias,
)
from ._api.introspection import Introspection
from ._api.local_actors import LocalActors
from ._api.proc_control import (
    PROC_ENTRY,
    install_proc_handlers,
    install_ready_handler,
    set_host_command,
    stop_everything,
    stop_local_actors,
)
from ._api.singletons import Singletons
from ._core.config import PRELOAD, log_forwarding
from ._core.future import Future
from ._core.process import (
    LISTEN_ENV,
    install,
    join_job,
    listen_address,
    maybe_runtime,
    set_starter,
)
from ._core.router import Runtime
from ._core.threads import leave_ctrl_c_to_the_main_thread, run_in_thread
from ._core.wire import Kind, ready_header
from ._debugger.remote_pdb import install_breakpoint_hook
from ._procs.agent import start_fork_server
from ._procs.binding import apply_binding
from ._procs.log_prefix import install_log_prefix
from ._procs.logs import capture_output, flush_lines, set_forwarding, show_lines
from ._procs.table import ProcTables
from ._procs.worker import HostService, worker_preload
from ._supervision.faults import before_fail_fast_exit
from ._supervision.supervise import Supervision, start_heartbeats
from ._telemetry.sdk import start_telemetry

__all__ = [
    "proc_main",
    "run_worker_loop_forever",
    "run_worker_loop_until_shutdown",
    "start_controller",
    "start_worker_loop_forever",
]

# The actor runtime's backend unless configured: measured on a 2-core machine,
# plain sockets carry a call_one round trip, a call to 8 actors and a
# broadcast far faster than pynng (docs/benchmarks.md); MONARCH_TRANSPORT=nng
# or enable_transport("nng") still choose nng.
RUNTIME_BACKEND = "socket"
CONTROLLER_STOP_TIMEOUT = 3.0  # seconds the controller's loop gets to close at exit


def wire(runtime: Runtime) -> None:
    """What every process's runtime has: its proc tables, its supervision,
    its actors."""
    runtime.provide(ProcTables())
    supervision = Supervision(runtime)
    actors = runtime.provide(LocalActors(runtime, ActorHost))
    runtime.handle(Kind.CALL, actors.deliver)
    install_breakpoint_hook()  # breakpoint() in an actor: a session for `monarch debug`
    install_log_prefix()  # [actor=...] before the log records of actors
    start_telemetry(runtime)  # the OpenTelemetry SDK the settings ask for
    Introspection(runtime)

    def find_actor(key: str) -> ActorHost | None:
        return cast(ActorHost | None, actors.hosts.get(key))  # every host here is an ActorHost

    supervision.find_actor = find_actor


# -- the controller ---------------------------------------------------------------------


def start_controller() -> Runtime:
    """Start the controller's runtime: its control loop on a thread of its own."""
    prefer_backend(RUNTIME_BACKEND)  # before the first listener; procs inherit it
    started: concurrent.futures.Future[Runtime] = concurrent.futures.Future()

    def main() -> None:
        leave_ctrl_c_to_the_main_thread()  # and every thread the loop starts
        loop = new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            gateway = attached()  # attach(addr): listen where the gateway relays to
            bind = listen_address() if gateway is None else Address.parse(gateway[1])
            check_listener(bind)
            listener = loop.run_until_complete(listen(bind))
            runtime = Runtime(loop, listener, "controller")
            if gateway is not None and gateway[0] != runtime.address:
                runtime.aliases.add(runtime.address)
                runtime.address = runtime.root = gateway[0]
            wire(runtime)
            install_ready_handler(runtime)
            runtime.handle(Kind.LOGS, lambda header, frames: show_lines(header, decode(frames)[1]))
            Singletons(runtime)
        except BaseException as error:
            started.set_exception(error)
            return
        started.set_result(runtime)
        runtime.serve()
        loop.run_until_complete(runtime.stopped.wait())

    thread = threading.Thread(target=main, name="monarch-control", daemon=True)
    thread.start()
    runtime = started.result(timeout=60)
    runtime.thread = thread
    atexit.register(_shutdown_at_exit)
    return runtime


def _shutdown_at_exit() -> None:
    runtime = maybe_runtime()
    if runtime is None or runtime.role != "controller":
        return
    try:
        stop_everything()
        stop_local_actors(runtime)
        _stop_controller_loop(runtime, CONTROLLER_STOP_TIMEOUT)
    finally:
        flush_lines()  # the last aggregation window's lines, whose timer would not fire


def _stop_controller_loop(runtime: Runtime, timeout: float) -> None:
    """End the controller's control loop and wait for its thread: a loop
    left running while the interpreter shuts down may fire a timer into a
    finalized interpreter (a crash at exit)."""

    async def close() -> None:
        try:
            await runtime.close()
        finally:
            runtime.stopped.set()

    # the loop may be gone or stuck: the thread join below is bounded either way
    with contextlib.suppress(Exception):
        asyncio.run_coroutine_threadsafe(close(), runtime.loop).result(timeout)
    if runtime.thread is not None:
        runtime.thread.join(timeout)


set_starter(start_controller)
before_fail_fast_exit(stop_everything)


# -- a worker --------------------------------------------------------------------------


def run_worker_loop_until_shutdown(
    *, address: str, ca: Any = TRUST_ALL, private_key: Any = None
) -> None:
    """Serve this host to controllers on other machines, and return once one shuts it down.

    A controller that goes away without shutting the host down has its
    processes here killed; the next one may attach.

    Args:
        address: where to listen: ``tcp://HOST:PORT``, ``ipc:///path``, or
            ``tcp://NAME:PORT@tcp://0.0.0.0:PORT`` to listen on every interface
            and be dialed by NAME.
        ca: ``"trust_all_connections"`` (the default): controllers prove
            themselves with the job's secret (``$MONARCH_JOB_SECRET`` or the
            file ``$MONARCH_JOB_SECRET_FILE`` names). Otherwise the certificate
            authority (PEM bytes or a file) that signed every side's certificate,
            for mutual TLS.
        private_key: with a certificate authority, this side's certificate and
            key (PEM bytes or a file holding both).

    Raises:
        RuntimeError: this process already runs Monarch (as a controller or a proc).
        OSError: nothing can listen at ``address``.
        ValueError: the address or the security options are invalid.
    """
    tls = configure_security(ca, private_key, [address])
    dial, bind = split_alias(address, tls)
    check_listener(bind)
    if maybe_runtime() is not None:
        raise RuntimeError(
            "this process already runs Monarch (as a controller or a proc); run the worker "
            "loop in a process of its own (`monarch worker --address ...`)"
        )
    prefer_backend(RUNTIME_BACKEND)
    # the host this worker is reached at (dial's, unless the port is the kernel's pick)
    where = Address.parse(dial if Address.parse(bind).port != 0 else bind)
    advertise = ""
    if where.scheme in ("tcp", "tls"):
        advertise = where.host if where.host not in ("0.0.0.0", "::") else _own_ip()
        # the procs forked here listen there, as this worker does (TLS or not)
        os.environ[LISTEN_ENV] = str(Address(where.scheme, host=advertise, port=0))
    # the fork server starts with the worker, before its runtime (no thread, no socket
    # yet), so it is this process forked: no second interpreter importing the runtime
    # its procs seal what they send over TCP: they inherit what that takes
    preload_sealing([str(where)])
    preload = worker_preload(PRELOAD.get().strip())
    server = start_fork_server("worker", PROC_ENTRY, preload, fork=True)
    loop = new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        listener = loop.run_until_complete(listen(bind))
    except OSError as error:
        server.stop()
        raise OSError(f"cannot listen at {bind}: {error}") from None
    runtime = Runtime(loop, listener, "worker")
    if dial != str(listener.address) and Address.parse(bind).port != 0:
        runtime.aliases.add(runtime.address)
        runtime.address = runtime.root = dial
    install(runtime)
    wire(runtime)
    service = HostService(runtime, PROC_ENTRY, advertise, server)
    runtime.serve()
    try:
        loop.run_until_complete(runtime.stopped.wait())
    finally:
        service.close()
        loop.run_until_complete(runtime.close())


def run_worker_loop_forever(*, address: str, ca: Any = TRUST_ALL, private_key: Any = None) -> None:
    """Serve this host at ``address`` until a controller shuts it down, then exit the process.

    Monarch's worker entry point; ``monarch worker`` runs it. Otherwise as
    ``run_worker_loop_until_shutdown``.

    Args:
        address: where to listen (see ``run_worker_loop_until_shutdown``).
        ca: ``"trust_all_connections"`` (the default): controllers prove
            themselves with the job's secret (``$MONARCH_JOB_SECRET`` or the
            file ``$MONARCH_JOB_SECRET_FILE`` names). Otherwise the certificate
            authority (PEM bytes or a file) that signed every side's certificate,
            for mutual TLS.
        private_key: with a certificate authority, this side's certificate and
            key (PEM bytes or a file holding both).
    """
    run_worker_loop_until_shutdown(address=address, ca=ca, private_key=private_key)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def start_worker_loop_forever(
    *, address: str, ca: Any = TRUST_ALL, private_key: Any = None
) -> Future[None]:
    """Serve this host at ``address`` on a thread of its own.

    Args:
        address: where to listen (see ``run_worker_loop_until_shutdown``).
        ca: ``"trust_all_connections"`` (the default): controllers prove
            themselves with the job's secret (``$MONARCH_JOB_SECRET`` or the
            file ``$MONARCH_JOB_SECRET_FILE`` names). Otherwise the certificate
            authority (PEM bytes or a file) that signed every side's certificate,
            for mutual TLS.
        private_key: with a certificate authority, this side's certificate and
            key (PEM bytes or a file holding both).

    Returns:
        A ``Future`` that resolves when a controller shuts the host down, or
        fails with what stopped the worker from serving.
    """
    done = run_in_thread(
        "monarch-worker",
        run_worker_loop_until_shutdown,
        address=address,
        ca=ca,
        private_key=private_key,
    )
    return Future._of(done)


def _own_ip() -> str:
    """This host's address for others, when a worker listens on every
    interface: its name's address, unless that is a loopback one (as
    ``/etc/hosts`` often says), then the address of the interface that
    routes off this host (a UDP "connect" sends nothing), else loopback."""
    try:
        named = socket.gethostbyname(socket.gethostname())
    except OSError:
        named = ""
    if named and not named.startswith("127."):
        return named
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("10.255.255.255", 1))
        routed = str(probe.getsockname()[0])
        if routed and routed != "0.0.0.0":
            return routed
    return named or "127.0.0.1"


# -- a proc -------------------------------------------------------------------------------


def proc_main(blob: bytes) -> int:
    """The life of a proc: forked by the host agent, it sets up the
    environment its point in the mesh implies, runs the user's bootstrap,
    starts its runtime, tells its owner where it listens, serves until told
    to stop or until its owner vanishes, then exits."""
    start: dict[str, Any] = pickle.loads(blob)
    _use_paths(start["path"])
    info: dict[str, Any] = pickle.loads(start["info"])
    os.environ.update(info["env"])
    monarch_config.inherit(info.get("config") or {})  # before anything reads a setting
    join_job(os.environ["MONARCH_JOB_DIR"])
    apply_binding(info.get("bind"))
    set_host_command(info.get("host_command"))
    sys.argv = [info.get("argv0", "monarch-proc")]
    loop = new_event_loop()
    asyncio.set_event_loop(loop)
    bootstrap = info.get("bootstrap")
    setup_error = None
    if bootstrap is not None:
        try:
            outcome = bootstrap()
            if inspect.isawaitable(outcome):
                loop.run_until_complete(_wait(outcome))
        except Exception as error:  # as in Monarch: `initialized` raises it, the proc lives on
            setup_error = setup_failure(error)
    bind = listen_address()
    check_listener(bind)
    listener = loop.run_until_complete(listen(bind))
    runtime = Runtime(loop, listener, "proc")
    runtime.root = info["root"]
    runtime.owner = owner = info["owner"]
    install(runtime)
    wire(runtime)
    install_proc_handlers(runtime, owner)
    runtime.get(LocalActors).setup_error = setup_error
    capture_output(
        runtime, owner, info["mesh"], info["rank"], info["env"]["HYPERACTOR_PROCESS_NAME"]
    )
    if log_forwarding():  # enable_log_forwarding, as the spawning process had it
        set_forwarding(True)
    runtime.send(
        owner, ready_header(info["mesh"], info["rank"], runtime.address, os.getpid()), setup_error
    )
    start_heartbeats(runtime, owner, info["mesh"], info["rank"], info["heartbeat"])
    runtime.serve()
    loop.run_until_complete(runtime.stopped.wait())
    loop.run_until_complete(runtime.close())
    sys.stdout.flush()
    sys.stderr.flush()
    return 0


def _use_paths(paths: list[str] | None) -> None:
    """A proc imports what its controller could: the controller's ``sys.path``
    (a script's own folder, folders a test run added) goes first."""
    if paths:
        sys.path[:] = [*paths, *(p for p in sys.path if p not in paths)]


async def _wait(outcome: Any) -> Any:
    return await outcome
