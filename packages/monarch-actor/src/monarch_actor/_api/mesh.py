"""Meshes of hosts, processes and actors, and the handles that reach them.

Every ``ProcMesh`` and ``ActorMesh`` handle is a ``Shape`` over the ranks of
its proc mesh's ``ProcTable`` (what this process knows of the processes), so
a slice is a new shape over the same table and pickles to a small reference.
"""

from __future__ import annotations

import concurrent.futures
import threading
import uuid
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

from monarch_mesh import Point, Shape, Slice
from monarch_transport import encode

from .._core import extensions
from .._core.current import current
from .._core.errors import SupervisionError
from .._core.extensions import extension
from .._core.future import Future
from .._core.gather import Gather
from .._core.ports import Port
from .._core.process import get_runtime
from .._core.reply import Reply
from .._core.router import Frames
from .._core.threads import run_in_thread
from .._core.wire import Key, Kind, Op
from .._procs.agent import HostAgent
from .._procs.binding import check_binding
from .._procs.bootstrap import BootstrapCommand, command_spec, default_bootstrap_cmd
from .._procs.logs import configure_streaming
from .._procs.remote import RemoteAgent
from .._procs.table import ProcTable, ProcTables, table_for
from .._supervision.supervise import Supervision
from .._supervision.wording import call_failed
from .actor import EndpointProperty, check_actor_class
from .creator import ROOT_CREATOR
from .endpoint import ActorEndpoint
from .mesh_ops import MeshOps
from .proc_control import (
    check_gpu_placement,
    host_agent,
    host_command,
    shutdown_context,
    start_procs,
    stop_procs,
    when_started,
    worker_agent,
)

__all__ = ["ActorMesh", "HostMesh", "ProcMesh", "this_host", "this_proc"]

A = TypeVar("A")
SHUTDOWN_TIMEOUT = 30.0  # seconds a worker gets to confirm it shut down


def _proc_mesh_ref(
    mesh_id: str,
    name: str,
    addresses: list[str],
    labels: list[str],
    s: tuple[int, list[int], list[int]],
) -> ProcMesh:
    offset, sizes, strides = s
    return ProcMesh(
        table_for(mesh_id, name, addresses),
        Shape(labels, Slice(offset=offset, sizes=sizes, strides=strides)),
    )


class HostMesh(MeshOps):
    """A mesh of hosts: ``this_host()`` is the one this code runs on;
    ``attach_to_workers`` gives one of hosts on other machines.

    Made by those two functions rather than by user code. The mesh
    ``attach_to_workers`` returned *owns* its hosts: ``stop()`` and
    ``shutdown()`` work on it. A slice of it, or a copy received from
    another process, is a *reference*: it spawns processes, but stopping or
    shutting down through it raises ``RuntimeError``.

    Args:
        shape: the mesh's shape, over host ranks.
        agents: per host rank, a callable that gives the agent that starts
            processes on that host.
        name: the mesh's name, for display.
        spawned: the proc meshes spawned on these hosts so far (shared with
            slices of the mesh, so ``stop`` reaches them all).
        owned: whether this mesh owns its hosts (may stop and shut them down).
        bootstrap: the command processes spawned here are launched with,
            unless ``spawn_procs`` names one (``None``: forked from the host's agent).
    """

    def __init__(
        self,
        shape: Shape,
        agents: list[Any],
        name: str = "hosts",
        spawned: list[ProcMesh] | None = None,
        owned: bool = False,
        bootstrap: BootstrapCommand | None = None,
    ) -> None:
        self._shape = shape
        self._agents = agents  # per host rank: a callable giving its agent
        self._name = name
        self._spawned = spawned if spawned is not None else []  # shared with slices
        self._owned = owned
        self._bootstrap = bootstrap
        self._shut_down = False

    def _new_with_shape(self, shape: Shape) -> HostMesh:
        self._check_up()
        if shape == self._shape:
            return self
        return HostMesh(shape, self._agents, self._name, self._spawned, False, self._bootstrap)

    def _check_up(self) -> None:
        if self._shut_down:
            raise RuntimeError("HostMesh has already been shut down")

    def _hosts(self) -> list[Any]:
        return [self._agents[rank]() for rank in self._shape.ndslice]

    @property
    def stream_logs(self) -> bool:
        """Whether the hosts stream their processes' output to this script on
        their own: always ``False``, as in Monarch (use ``ProcMesh.logging_option``)."""
        return False

    @property
    def is_fake_in_process(self) -> bool:
        """Whether this mesh only simulates hosts inside this process: always
        ``False`` (every process a host mesh spawns is a real OS process)."""
        return False

    def with_python_executable(self, python_executable: str) -> HostMesh:
        """The same hosts, launching their processes with another Python interpreter.

        Each process spawned through the returned mesh is launched by
        ``python_executable -m monarch_actor._procs.zygote ...`` (a wrapper
        script that ends by executing Python works too), and so is each one
        its actors spawn through ``this_host()``. That interpreter must be
        able to import this runtime.

        Args:
            python_executable: the interpreter (a path, or a name looked up on ``PATH``).

        Returns:
            A new host mesh over the same hosts; this one is unchanged.

        Raises:
            TypeError: ``python_executable`` is not a non-empty string.
            RuntimeError: the mesh was shut down.
        """
        self._check_up()
        base = default_bootstrap_cmd()
        command = BootstrapCommand(python_executable, None, base.args, base.env, base.inherit_env)
        mesh = HostMesh(self._shape, self._agents, self._name, self._spawned, self._owned, command)
        return mesh

    def spawn_procs(
        self,
        per_host: dict[str, int] | None = None,
        bootstrap: Callable[[], Any] | None = None,
        name: str | None = None,
        proc_bind: list[dict[str, str]] | None = None,
        bootstrap_command: BootstrapCommand | Callable[[Point], BootstrapCommand] | None = None,
    ) -> ProcMesh:
        """Start processes on every host: ``per_host={"gpus": 8}`` gives each host 8.

        Returns at once; the processes start in the background
        (``await procs.initialized`` waits for them).

        On a host with GPUs, each process along a ``gpus`` (or ``gpu``)
        dimension gets the GPU of its index along it: ``CUDA_VISIBLE_DEVICES``
        names that one GPU (its ``cuda:0``), with ``NCCL_HOSTID`` and
        ``MONARCH_HOST_GPUS`` beside the usual ``RANK``/``LOCAL_RANK``/
        ``WORLD_SIZE`` variables. Hosts without GPUs place nothing.

        Args:
            per_host: the new dimensions and their sizes, added after the host
                mesh's own; ``None`` or ``{}`` is one process per host.
            bootstrap: a callable run in each new process before it serves
                (setup such as environment variables); it may be ``async``. If it
                raises, ``initialized`` raises an ``ActorError`` with its traceback
                (as in Monarch), and so does the ``initialized`` of each actor mesh
                spawned there; the processes live on until stopped.
            name: the proc mesh's name, shown in errors and logs (default ``"anon"``).
            proc_bind: one CPU binding per process of a host, in row-major
                order of ``per_host``: dicts with ``cpus``/``physcpubind`` (a CPU
                list such as ``"0-3,8"``) or ``cpunodebind`` (NUMA nodes).
            bootstrap_command: the command that launches each process (a
                ``BootstrapCommand``, usually ``default_bootstrap_cmd()`` with changes),
                or a function giving one for each process's ``Point`` in the new
                mesh. The host's agent starts that command (in the host's
                environment, with the command's ``env`` on top) instead of
                forking the process, and the command must end by running this
                runtime's fork server module with the arguments the host adds.
                ``None``: the mesh's own command (``with_python_executable``), or forked.

        Returns:
            The proc mesh, of extent the host mesh's dimensions plus ``per_host``'s.

        Raises:
            ValueError: a ``per_host`` size is not an int >= 1 or its name is
                already a dimension of the host mesh; ``proc_bind`` does not have one
                valid entry per process of a host; a host has fewer GPUs than the
                ``gpus`` dimension asks (``configure(share_gpus=True)`` lets processes
                share them).
            TypeError: ``bootstrap`` is not callable, a ``proc_bind`` entry is not a
                dict, or ``bootstrap_command`` is not (and does not give) a ``BootstrapCommand``.
            RuntimeError: the host mesh was shut down.
        """
        per_host = dict(per_host or {})
        for label, size in per_host.items():
            if (
                not isinstance(label, str)
                or isinstance(size, bool)
                or not isinstance(size, int)
                or size < 1
            ):
                raise ValueError(
                    f"per_host maps dimension names to sizes >= 1, got {label!r}: {size!r}"
                )
            if label in self._shape.labels:
                raise ValueError(
                    f"per_host dimension {label!r} is already a dimension of the host mesh"
                )
        if proc_bind is not None:
            local = _product(per_host.values())
            if len(proc_bind) != local:
                raise ValueError(
                    f"proc_bind length ({len(proc_bind)}) must equal procs_per_host ({local}): "
                    f"give one binding per process of a host, in row-major order of per_host"
                )
            for binding in proc_bind:
                check_binding(binding)
        if bootstrap is not None and not callable(bootstrap):
            raise TypeError(f"bootstrap must be a callable, got {type(bootstrap).__name__}")
        self._check_up()
        labels = self._shape.labels + list(per_host)
        sizes = list(self._shape.extent.sizes) + list(per_host.values())
        shape = Shape(labels, Slice.new_row_major(sizes))
        commands = _commands(bootstrap_command or self._bootstrap, shape)
        name = name or "anon"
        hosts = self._hosts()
        check_gpu_placement(hosts, per_host, name)
        table = ProcTable(f"{name}-{uuid.uuid4().hex[:12]}", name, len(shape))
        procs = ProcMesh(table, shape, self)
        Supervision.of(get_runtime()).adopt(procs, "proc")
        self._spawned.append(procs)
        start_procs(hosts, table, per_host, bootstrap, proc_bind, commands, self._bootstrap)
        return procs

    def _check_owner(self, verb: str) -> None:
        if not self._owned:
            raise RuntimeError(f"cannot {verb} `HostMesh` that is a reference instead of owned")

    def stop(self) -> Future[None]:
        """Stop every proc mesh spawned on these hosts (their actors'
        ``__cleanup__`` runs); the hosts stay, ready for more.

        As in Monarch, the stop starts when the returned future is first
        looked at (``get``, ``await``, a callback): a future dropped unseen
        stops nothing.

        Returns:
            A future resolved once the processes have stopped; it raises
            ``RuntimeError`` when this mesh is a reference (a slice, or a copy
            received from another process) or was shut down.
        """
        return Future._of(_Deferred(self._stop_now))

    def _stop_now(self, done: concurrent.futures.Future[None]) -> None:
        try:
            self._check_owner("stop")
            self._check_up()
        except RuntimeError as error:
            done.set_exception(error)
            return
        self._stop_spawned(done)

    def _stop_spawned(self, done: concurrent.futures.Future[None]) -> None:
        meshes, self._spawned[:] = list(self._spawned), []

        def run() -> None:
            for mesh in meshes:
                mesh.stop("the host mesh was stopped").get()

        _chain(run_in_thread("monarch-host-stop", run), done)

    def shutdown(self) -> Future[None]:
        """Stop every process this script started on these hosts; workers on
        other machines then exit (``run_worker_loop_forever`` returns). The
        mesh cannot be used afterwards.

        As in Monarch, the shutdown starts when the returned future is first
        looked at (``get``, ``await``, a callback): a future dropped unseen
        shuts nothing down.

        Returns:
            A future resolved once the hosts are down; it raises
            ``RuntimeError`` when this mesh is a reference (a slice, or a copy
            received from another process) or was shut down already.
        """
        return Future._of(_Deferred(self._shutdown_now))

    def _shutdown_now(self, done: concurrent.futures.Future[None]) -> None:
        try:
            self._check_owner("shut down")
            self._check_up()
        except RuntimeError as error:
            done.set_exception(error)
            return
        self._shut_down = True
        hosts = self._hosts()
        if not any(isinstance(agent, RemoteAgent) for agent in hosts):
            _chain(shutdown_context(), done)
            return
        stopped: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._stop_spawned(stopped)

        def run() -> None:
            stopped.result()
            _stop_meshes_on(hosts, "the host mesh was shut down")
            for agent in hosts:
                if isinstance(agent, RemoteAgent):
                    agent.shutdown()
            for agent in hosts:
                if isinstance(agent, RemoteAgent):
                    agent.down.result(SHUTDOWN_TIMEOUT)

        _chain(run_in_thread("monarch-host-shutdown", run), done)

    @property
    def initialized(self) -> Future[bool]:
        """``True`` once every host's worker answered; raises if one cannot be reached.

        Raises:
            RuntimeError: the mesh was shut down.
        """
        self._check_up()

        def run() -> bool:
            for agent in self._hosts():
                if isinstance(agent, RemoteAgent):
                    agent.ready.result()
            return True

        return Future._of(run_in_thread("monarch-host-init", run))

    async def __aenter__(self) -> HostMesh:
        self._check_up()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if not self._shut_down:  # nested ``async with`` blocks shut down once
            await self.shutdown()

    def __reduce__(self) -> tuple[Any, ...]:
        self._check_up()
        s = self._shape.ndslice
        return (
            _host_mesh_ref,
            (
                self._shape.labels,
                (s.offset, s.sizes, s.strides),
                [_host_ref(agent) for agent in self._agents],
                self._name,
                self._bootstrap,
            ),
        )

    def __repr__(self) -> str:
        return f"HostMesh({self._shape.extent})"


def _stop_meshes_on(hosts: list[Any], reason: str) -> None:
    """Stop every proc mesh this process started with a process on one of
    ``hosts`` (spawned through a copy or a slice of the host mesh too), so
    that none is reported lost when the hosts go."""
    runtime = get_runtime()
    going = {id(agent) for agent in hosts}
    stopping = [
        stop_procs(table, list(range(table.size)), reason)
        for table in list(runtime.get(ProcTables).values())
        if table.owned
        and not table.stopped
        and any(id(agent) in going for agent in list(table.agents.values()))
    ]
    for future in stopping:
        future.get()


class _Deferred(concurrent.futures.Future[Any]):
    """A future whose work starts when it is first looked at (result,
    exception, done, a callback, ``await``), as Monarch's teardown futures:
    one dropped unseen never runs ``start``."""

    def __init__(self, start: Callable[[concurrent.futures.Future[Any]], None]) -> None:
        super().__init__()
        self._start: Callable[[concurrent.futures.Future[Any]], None] | None = start
        self._start_lock = threading.Lock()

    def _kick(self) -> None:
        with self._start_lock:
            start, self._start = self._start, None
        if start is not None:
            try:
                start(self)
            except BaseException as error:
                if not super().done():
                    self.set_exception(error)

    def result(self, timeout: float | None = None) -> Any:
        self._kick()
        return super().result(timeout)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        self._kick()
        return super().exception(timeout)

    def done(self) -> bool:
        self._kick()
        return super().done()

    def add_done_callback(self, fn: Callable[[concurrent.futures.Future[Any]], object]) -> None:
        self._kick()
        super().add_done_callback(fn)


def _chain(
    source: Future[None] | concurrent.futures.Future[None], done: concurrent.futures.Future[None]
) -> None:
    """Settle ``done`` as ``source`` settles."""

    def settle(_: object) -> None:
        error = source.exception()
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(None)

    source.add_done_callback(settle)


def _commands(
    command: BootstrapCommand | Callable[[Point], BootstrapCommand] | None, shape: Shape
) -> list[dict[str, Any] | None] | None:
    """Each process's bootstrap command as its host receives it, or ``None`` (all forked)."""
    if command is None:
        return None
    if not isinstance(command, BootstrapCommand) and not callable(command):
        raise TypeError(
            "bootstrap_command is a BootstrapCommand (see default_bootstrap_cmd()) or a "
            f"function of a Point giving one, got {type(command).__name__}"
        )
    specs: list[dict[str, Any] | None] = []
    for rank in range(len(shape)):
        if isinstance(command, BootstrapCommand):
            made: object = command
        else:
            made = command(Point(rank, shape.extent))
        if not isinstance(made, BootstrapCommand):
            raise TypeError(
                f"bootstrap_command gave {type(made).__name__} for rank {rank}, "
                "not a BootstrapCommand"
            )
        specs.append(command_spec(made))
    return specs


class _WorkerRef:
    """A worker's host agent named by its address: in a process that
    received a host mesh, attached on first use."""

    def __init__(self, address: str) -> None:
        self.address = address

    def __call__(self) -> RemoteAgent:
        return worker_agent(self.address)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_WorkerRef, (self.address,))


class _LocalHostRef:
    """The host agent of the machine a host mesh was made on, as another
    process on that machine reaches it: its own agent there."""

    def __init__(self, hostname: str) -> None:
        self.hostname = hostname

    def __call__(self) -> HostAgent:
        if self.hostname != HostAgent.hostname:
            raise RuntimeError(
                f"this host mesh's host {self.hostname} was this_host() of a process there; "
                f"processes cannot be started on it from {HostAgent.hostname}: spawn them on a "
                "host mesh of workers (attach_to_workers), which any process of the job can reach"
            )
        return host_agent()

    def __reduce__(self) -> tuple[Any, ...]:
        return (_LocalHostRef, (self.hostname,))


def _host_ref(agent: Any) -> Any:
    """What a host mesh's agent becomes in a pickle."""
    if isinstance(agent, (_WorkerRef, _LocalHostRef)):
        return agent
    if agent is host_agent:  # this_host(): not started just to be pickled
        return _LocalHostRef(HostAgent.hostname)
    found = agent()
    if isinstance(found, RemoteAgent):
        return _WorkerRef(found.address)
    if isinstance(found, HostAgent):
        return _LocalHostRef(found.hostname)
    raise TypeError(f"a host mesh over {type(found).__name__} agents cannot be pickled")


def _host_mesh_ref(
    labels: list[str],
    s: tuple[int, list[int], list[int]],
    agents: list[Any],
    name: str,
    bootstrap: BootstrapCommand | None,
) -> HostMesh:
    """A host mesh received from another process: a reference to the same hosts."""
    offset, sizes, strides = s
    shape = Shape(labels, Slice(offset=offset, sizes=sizes, strides=strides))
    return HostMesh(shape, agents, name, None, False, bootstrap)


def _product(values: Any) -> int:
    total = 1
    for v in values:
        total *= v
    return total


class ProcMesh(MeshOps):
    """A mesh of processes; ``spawn`` puts one actor in each.

    Made by ``HostMesh.spawn_procs`` and ``this_proc()`` rather than by user code.

    Args:
        table: what this process knows of the mesh's processes (their addresses).
        shape: the mesh's shape, over the table's ranks.
        host: the host mesh the processes were spawned on, when spawned from here.
    """

    def __init__(self, table: ProcTable, shape: Shape, host: HostMesh | None = None) -> None:
        self._table = table
        self._shape = shape
        self._host = host

    def _new_with_shape(self, shape: Shape) -> ProcMesh:
        return ProcMesh(self._table, shape, self._host)

    def spawn(self, name: str, Class: type[A], *args: Any, **kwargs: Any) -> A:
        """Start one ``Class(*args, **kwargs)`` in every process of this mesh; returns at once.

        Args:
            name: the actor mesh's name, shown in errors and logs.
            Class: the ``Actor`` subclass to start; its ``__init__`` gets ``args``
                and ``kwargs``.

        Returns:
            The actor mesh, with this mesh's shape (typed as ``Class`` so its
            endpoints type-check); ``await mesh.initialized`` waits for every
            ``__init__``. If the processes hosted a failed actor, the spawn is
            refused and every use of the mesh raises ``RuntimeError``.

        Raises:
            TypeError: ``name`` is not a non-empty string.
            ValueError: ``Class`` is not an ``Actor`` subclass, mixes ``def`` and
                ``async def`` endpoints, or has an endpoint named as a mesh attribute.
            SupervisionError: the proc mesh has failed or was stopped.
        """
        if not isinstance(name, str) or not name:
            raise TypeError(f"spawn() takes the actor mesh's name first, got {name!r}")
        is_async = check_actor_class(Class)
        runtime = get_runtime()
        supervision = Supervision.of(runtime)
        why = supervision.dead(self._table.id, self._shape.ndslice)
        if why is not None:
            raise SupervisionError(f"cannot spawn {name} on proc mesh {self._table.name}: {why}")
        key = f"{name}-{uuid.uuid4().hex[:12]}"
        mesh: ActorMesh[A] = ActorMesh(Class, key, name, self, self._shape, is_async)
        refused = supervision.refusing_spawns(self._table.id, self._shape.ndslice)
        if refused:  # as in Monarch: a handle whose first use raises
            mesh._refused = _spawn_refused(refused, len(self._shape))
            mesh._started = Reply()
            mesh._started.set_exception(mesh._refused)
            return mesh  # type: ignore[return-value]
        if extensions._transforms:  # as an endpoint call's (distributed tensors: their shards)
            args, kwargs = extensions.transformed(mesh, args, kwargs)
        spawner = current()  # None on the controller: the root client spawns
        creator = ROOT_CREATOR if spawner is None else spawner.actor_instance.as_creator()
        frames = encode((Class, args, kwargs, {"proc_mesh": self._known(), "creator": creator}))
        owner = supervision.adopt(mesh, "actor")
        header = {
            Key.OP: Op.SPAWN,
            Key.ASYNC: is_async,
            Key.OWNER: runtime.address,
            Key.OWNER_ACTOR: owner,
            Key.TABLE: self._table.id,
        }
        started = Gather(runtime, len(self._shape), "all")
        mesh._started = started.result
        mesh._cast_message(self._shape, header, frames, started, None)
        return mesh  # type: ignore[return-value]

    def _known(self) -> ProcMesh | None:
        """This mesh, where it can be pickled now (refs elsewhere, or started)."""
        return self if self._table.ready and self._table.failure is None else None

    def stop(self, reason: str = "stopped by client") -> Future[None]:
        """Stop every actor (running ``__cleanup__``) and every process of this mesh.

        Args:
            reason: why, reported to callers that reach the stopped actors.

        Returns:
            A ``Future`` that resolves once the processes are stopped.
        """
        return stop_procs(self._table, list(self._shape.ndslice), reason)

    @property
    def initialized(self) -> Future[bool]:
        """Resolves to ``True`` once every process has started; raises if one failed to."""
        return when_started(self._table)

    def activate(self) -> Any:
        """A context manager under which torch operations make distributed
        tensors on every process of this mesh (needs ``monarch-tensor``)."""
        hook = extension("activate")
        assert hook is not None
        return hook(self)

    def to_table(self) -> str:
        """The processes of this mesh as a table, as its device mesh shows
        them: each one's coordinates and rank (needs ``monarch-tensor``)."""
        return self._device_mesh().to_table()  # type: ignore[no-any-return]

    def rank_tensor(self, dim: str | Sequence[str]) -> Any:
        """A distributed scalar tensor holding each process's index along
        ``dim`` (row-major over several names), on this mesh's device mesh
        (needs ``monarch-tensor``).

        Args:
            dim: a dimension name, or several.

        Raises:
            KeyError: a name is not a dimension of this mesh.
        """
        return self._device_mesh().rank(dim)

    def rank_tensors(self) -> dict[str, Any]:
        """``rank_tensor(dim)`` for every dimension of this mesh (needs ``monarch-tensor``)."""
        return dict(self._device_mesh().ranks)

    def _device_mesh(self) -> Any:
        """This mesh's device mesh (distributed tensors), made on first use."""
        hook = extension("device_mesh")
        assert hook is not None
        return hook(self)

    @property
    def host_mesh(self) -> HostMesh:
        """The host mesh a one-process mesh was spawned on.

        Raises:
            RuntimeError: the mesh has several processes, or was not spawned from here.
        """
        if len(self._shape) != 1 or self._host is None:
            raise RuntimeError("host_mesh is only known for a one-process mesh spawned here")
        return self._host

    async def logging_option(
        self,
        stream_to_client: bool = False,
        aggregate_window_sec: int | None = None,
        level: int = 20,
    ) -> None:
        """Stream the processes' stdout and stderr to this script, tagged with rank.

        Args:
            stream_to_client: ``True`` sends the lines to this script; ``False``
                leaves them on the terminal the processes inherited.
            aggregate_window_sec: seconds over which identical lines are shown
                once, with how many there were (``[10 similar log lines] ...``
                for 5 lines said by each of 2 ranks); ``None`` or 0 shows every
                line as it comes. The window is this proc mesh's own.
            level: the level (0 to 255) of each process's root logger, as in
                Monarch: ``logging.INFO`` (the default) lets ``logger.info`` lines
                through; printed lines are streamed whatever it is.

        Raises:
            ValueError: ``level`` or ``aggregate_window_sec`` is out of range.
        """
        if not 0 <= level <= 255:
            raise ValueError(f"level must be in 0..255, got {level}")
        await configure_streaming(self, stream_to_client, aggregate_window_sec, level)

    async def __aenter__(self) -> ProcMesh:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def __reduce__(self) -> tuple[Any, ...]:
        addresses = self._table.wait_ready(get_runtime())
        s = self._shape.ndslice
        return (
            _proc_mesh_ref,
            (
                self._table.id,
                self._table.name,
                addresses,
                self._shape.labels,
                (s.offset, s.sizes, s.strides),
            ),
        )

    def __repr__(self) -> str:
        return f"ProcMesh({self._table.name}, {self._shape.extent})"


class ActorMesh(MeshOps, Generic[A]):
    """One actor per process of a proc mesh; its endpoints are attributes.

    ``mesh.method`` is the method's ``ActorEndpoint`` (``mesh.method.call()``);
    a method not marked ``@endpoint`` is reachable through ``as_endpoint``.
    Made by ``ProcMesh.spawn``, not by user code.

    Args:
        cls: the actor class.
        key: the mesh's unique id in the job.
        name: the name given to ``spawn``.
        procs: the proc mesh the actors were spawned on.
        shape: the ranks of ``procs`` this mesh (or slice) covers.
        is_async: whether the actor's endpoints are ``async def``.
    """

    def __init__(
        self, cls: type[A], key: str, name: str, procs: ProcMesh, shape: Shape, is_async: bool
    ) -> None:
        self._class = cls
        self._key = key
        self._spawn_name = name
        self._procs = procs
        self._shape = shape
        self._is_async = is_async
        self._started: Reply[Any] | None = None  # where it was spawned
        self._refused: RuntimeError | None = None  # the spawn was refused: every use raises this

    def _new_with_shape(self, shape: Shape) -> ActorMesh[A]:
        mesh = ActorMesh(
            self._class, self._key, self._spawn_name, self._procs, shape, self._is_async
        )
        mesh._started = self._started
        mesh._refused = self._refused
        return mesh

    @property
    def _name(self) -> Future[str]:
        """A future of the mesh's name, as Monarch's ``ActorMesh._name``: the
        ``mesh_name`` of the failures of this mesh that ``__supervise__`` gets."""
        return Future._done(self._key)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in (
            "_class",
            "_key",
            "_spawn_name",
            "_procs",
            "_shape",
            "_is_async",
            "_started",
            "_refused",
        ):
            raise AttributeError(name)
        attr = getattr(self._class, name, None)
        if isinstance(attr, EndpointProperty):
            # kept: the next ``mesh.method`` is a plain attribute read
            endpoint: ActorEndpoint[Any, Any] = ActorEndpoint(self, attr)
            self.__dict__[name] = endpoint
            return endpoint
        if callable(attr):
            return _NotAnEndpoint(self, name)
        raise AttributeError(f"{self._class.__qualname__} actor mesh has no endpoint {name!r}")

    def _cast_message(
        self,
        shape: Shape,
        header: dict[str, Any],
        frames: Frames,
        gather: Gather | None,
        port: Port[Any] | None,
    ) -> None:
        runtime = get_runtime()
        table = self._procs._table
        header.update({Key.KIND: Kind.CALL, Key.ACTOR: self._key, Key.NAME: self._spawn_name})
        if port is not None:
            header[Key.REPLY_TO] = [port._address, port._pid]
        why = Supervision.of(runtime).dead(self._key, shape.ndslice)
        error: Exception | None = self._refused
        if error is None and why is not None and header[Key.OP] == Op.CALL:
            error = SupervisionError(call_failed(self._spawn_name, header[Key.METHOD], why))
        if error is not None:
            if gather is None:
                raise error
            gather.fail(error)
            return

        def go() -> None:
            addresses = [table.addresses[rank] or "" for rank in shape.ndslice]
            if gather is not None:
                header[Key.REPLY_TO] = gather.open(addresses)
            # a call waits for its answers: it leaves at once; a broadcast has no
            # one waiting and goes with the loop's batch of writes
            runtime.cast(shape, addresses, header, frames, batch=gather is None)

        table.run_in_order(runtime, go)

    def stop(self, reason: str = "stopped by client") -> Future[None]:
        """Stop these actors (their ``__cleanup__`` runs); their processes stay.

        Args:
            reason: why, reported to later callers of the stopped actors.

        Returns:
            A ``Future`` that resolves once every actor has stopped; at once when
            they were already stopped (stopping twice is no error, as in Monarch).
        """
        runtime = get_runtime()
        supervision = Supervision.of(runtime)
        why = supervision.tree.dead(self._key, list(self._shape.ndslice))
        if why is not None and why.startswith("stopped:"):
            return Future._done(None)
        if len(self._shape) == len(self._procs._shape):
            supervision.stopping(self._key, reason)
        gather = Gather(runtime, len(self._shape), "all")
        header = {Key.OP: Op.STOP, Key.METHOD: "stop", Key.WHY: reason}
        self._cast_message(self._shape, header, encode(None), gather, None)
        done: Future[Any] = Future._of(gather.result)
        return done

    @property
    def initialized(self) -> Future[None]:
        """Resolves once every actor's ``__init__`` returned; raises the error
        of one that raised (or of a process that died while spawning)."""
        if self._started is None:  # a reference received from elsewhere
            return Future._done(None)
        done: Reply[None] = Reply()

        def settle(started: Reply[Any]) -> None:
            error = started.exception()
            if error is not None:
                done.set_exception(error)
            else:
                done.set_result(None)

        self._started.add_done_callback(settle)
        return Future._of(done)

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            ActorMesh,
            (self._class, self._key, self._spawn_name, self._procs, self._shape, self._is_async),
        )

    def __repr__(self) -> str:
        inner = "<class 'monarch_actor.ActorMesh'>"
        return f"ActorMesh(class={self._class}, shape={self._shape}), inner={inner})"


class _NotAnEndpoint:
    def __init__(self, mesh: ActorMesh[Any], name: str) -> None:
        self._mesh, self._cls, self._name = mesh, mesh._class, name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(
            f"Actor {self._cls.__qualname__}.{self._name} is not annotated as an endpoint; "
            f"mark it @endpoint to call it through the mesh"
        )


_singletons: dict[str, ProcMesh] = {}


def this_proc() -> ProcMesh:
    """The one-process mesh of the calling process (the controller's own in a script)."""
    runtime = get_runtime()
    mesh = _singletons.get(runtime.address)
    if mesh is None:
        table = ProcTable(f"proc-{runtime.address}", "local", 1, [runtime.address])
        mesh = _singletons[runtime.address] = ProcMesh(table, Shape.unity())
    return mesh


def this_host() -> HostMesh:
    """The host this code runs on, as a mesh with no dimensions.

    In a process spawned through ``HostMesh.with_python_executable``, it
    launches processes with that interpreter too."""
    return HostMesh(Shape.unity(), [host_agent], owned=True, bootstrap=host_command())


def as_endpoint(
    method: Any, *, propagate: Any = None, explicit_response_port: bool = False
) -> ActorEndpoint[..., Any]:
    """An endpoint with every adverb for a method that is not marked ``@endpoint``.

    ``as_endpoint(mesh.plain_method).call()``.

    Args:
        method: the method as reached through an actor mesh (``mesh.plain_method``).
        propagate: as for ``endpoint``: how ``rref()`` calls learn what the
            method returns (distributed tensors).
        explicit_response_port: the method takes a ``Port`` first and answers through it.

    Raises:
        ValueError: ``method`` is not a plain method of an actor mesh, or is an
            ``async def`` on an actor whose endpoints are ``def``.
    """
    if not isinstance(method, _NotAnEndpoint):
        raise ValueError(
            f"as_endpoint() takes a method of an actor mesh that is not an endpoint "
            f"(mesh.some_method), got {method!r}"
        )
    function = getattr(method._cls, method._name)
    prop: EndpointProperty[..., Any] = EndpointProperty(function, propagate, explicit_response_port)
    if method._mesh._is_async != prop.is_async and not method._mesh._is_async:
        raise ValueError(f"{method._name} is async but {method._cls.__qualname__} is a sync actor")
    return ActorEndpoint(method._mesh, prop, plain=True)


def _spawn_refused(positions: list[int], size: int) -> RuntimeError:
    """Monarch's error for a spawn on processes that hosted a failed actor:
    each run of ranks with its status."""
    failed = set(positions)
    runs: list[str] = []
    start = 0
    for i in range(1, size + 1):
        if i == size or (i in failed) != (start in failed):
            status = (
                "Failed(Cannot spawn new actors on mesh with supervision events)"
                if start in failed
                else "Running"
            )
            runs.append(f"{status}={start}..{i}")
            start = i
    return RuntimeError(
        f"error spawning actor mesh: statuses: {';'.join(runs)} (a process that hosted a failed "
        "actor accepts no new actors: spawn on a slice of healthy processes, or on a new proc mesh)"
    )
