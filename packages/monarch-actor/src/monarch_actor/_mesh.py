"""Meshes of hosts, processes and actors, and the handles that reach them.

A ``ProcTable`` is what this process knows of one proc mesh's processes
(their addresses, once they have started). Every ``ProcMesh`` and
``ActorMesh`` handle is a ``Shape`` over its table's ranks, so a slice is a
new shape over the same table and pickles to a small reference.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import threading
import uuid
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from monarch_mesh import Shape, Slice
from monarch_transport import encode

from ._actor import EndpointProperty, check_actor_class
from ._binding import check_binding
from ._endpoint import ActorEndpoint, _Gather
from ._errors import SupervisionError
from ._future import Future
from ._mesh_ops import MeshOps
from ._port import Port
from ._runtime import Frames, Runtime, get_runtime

__all__ = ["ActorMesh", "HostMesh", "ProcMesh", "ProcTable", "this_host", "this_proc"]

A = TypeVar("A")
READY_TIMEOUT = 120.0  # seconds to wait for a proc mesh to start before pickling it


class ProcTable:
    """The processes of one proc mesh as this process knows them."""

    def __init__(
        self, mesh_id: str, name: str, size: int, addresses: list[str] | None = None
    ) -> None:
        self.id = mesh_id
        self.name = name
        self.size = size
        self.addresses: list[str | None] = list(addresses) if addresses else [None] * size
        self.ready = addresses is not None
        self.ready_event = threading.Event()
        if self.ready:
            self.ready_event.set()
        self.pending: list[Callable[[], None]] = []
        self.pids: dict[int, int] = {}  # rank -> pid, while the process lives
        self.exit_waiters: list[tuple[list[int], Callable[[], None]]] = []
        self.failure: str | None = None
        self.owned = False
        self.stopping: set[int] = set()  # ranks asked to stop: their exit is no failure

    @property
    def stopped(self) -> bool:
        return len(self.stopping) == self.size

    def when_ready(self, fn: Callable[[], None]) -> None:  # on the loop
        if self.ready:
            fn()
        else:
            self.pending.append(fn)

    def mark_ready(self) -> None:  # on the loop
        self.ready = True
        self.ready_event.set()
        pending, self.pending = self.pending, []
        for fn in pending:
            fn()

    def when_exited(self, ranks: list[int], fn: Callable[[], None]) -> None:  # on the loop
        """Call ``fn`` once every process of ``ranks`` has exited."""
        self.exit_waiters.append((ranks, fn))
        self.notify_exits()

    def notify_exits(self) -> None:  # on the loop
        waiting = []
        for ranks, fn in self.exit_waiters:
            if any(rank in self.pids for rank in ranks):
                waiting.append((ranks, fn))
            else:
                fn()
        self.exit_waiters = waiting

    def wait_ready(self, runtime: Runtime) -> list[str]:
        if not self.ready_event.is_set():
            if runtime.on_loop():
                raise RuntimeError(f"proc mesh {self.name} is still starting")
            if not self.ready_event.wait(READY_TIMEOUT):
                raise TimeoutError(f"proc mesh {self.name} did not start in {READY_TIMEOUT} s")
        if self.failure is not None:
            raise RuntimeError(f"proc mesh {self.name} failed to start: {self.failure}")
        return [a or "" for a in self.addresses]


def table_for(mesh_id: str, name: str, addresses: list[str]) -> ProcTable:
    """The table of a mesh received from another process (one per mesh here)."""
    runtime = get_runtime()
    tables: dict[str, ProcTable] = runtime.tables
    table = tables.get(mesh_id)
    if table is None:
        table = tables[mesh_id] = ProcTable(mesh_id, name, len(addresses), addresses)
    elif not table.ready and all(addresses):
        table.addresses = list(addresses)
        runtime.call_soon(table.mark_ready)
    return table


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
    """A mesh of hosts; ``this_host()`` is the one this code runs on."""

    def __init__(self, shape: Shape, agents: list[Any]) -> None:
        self._shape = shape
        self._agents = agents

    def _new_with_shape(self, shape: Shape) -> HostMesh:
        return HostMesh(shape, self._agents)

    def spawn_procs(
        self,
        per_host: dict[str, int] | None = None,
        bootstrap: Callable[[], Any] | None = None,
        name: str | None = None,
        proc_bind: list[dict[str, str]] | None = None,
        bootstrap_command: Any = None,
    ) -> ProcMesh:
        """Start processes on every host: ``per_host={"gpus": 8}`` gives each
        host 8. Returns at once; the processes start in the background."""
        from ._controller import spawn_procs

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
            if len(proc_bind) != _product(per_host.values()):
                raise ValueError(
                    f"proc_bind has {len(proc_bind)} entries for "
                    f"{_product(per_host.values())} processes per host"
                )
            for binding in proc_bind:
                check_binding(binding)
        if bootstrap_command is not None:
            raise ValueError(
                "bootstrap_command is not supported: processes are forked from the host agent, "
                "not launched by a command; run setup code in each process with bootstrap=..."
            )
        if bootstrap is not None and not callable(bootstrap):
            raise TypeError(f"bootstrap must be a callable, got {type(bootstrap).__name__}")
        labels = self._shape.labels + list(per_host)
        sizes = list(self._shape.extent.sizes) + list(per_host.values())
        procs: ProcMesh = spawn_procs(
            self,
            Shape(labels, Slice.new_row_major(sizes)),
            per_host,
            bootstrap,
            name or "anon",
            proc_bind,
        )
        return procs

    def shutdown(self) -> Future[None]:
        from ._controller import shutdown_host

        return shutdown_host(self)

    @property
    def initialized(self) -> Future[bool]:
        return Future._done(True)

    def __repr__(self) -> str:
        return f"HostMesh({self._shape.extent})"


def _product(values: Any) -> int:
    total = 1
    for v in values:
        total *= v
    return total


class ProcMesh(MeshOps):
    """A mesh of processes; ``spawn`` puts one actor in each."""

    def __init__(self, table: ProcTable, shape: Shape, host: HostMesh | None = None) -> None:
        self._table = table
        self._shape = shape
        self._host = host

    def _new_with_shape(self, shape: Shape) -> ProcMesh:
        return ProcMesh(self._table, shape, self._host)

    def spawn(self, name: str, Class: type[A], *args: Any, **kwargs: Any) -> A:
        """One ``Class(*args, **kwargs)`` in every process of this mesh; returns at once."""
        if not isinstance(name, str) or not name:
            raise TypeError(f"spawn() takes the actor mesh's name first, got {name!r}")
        is_async = check_actor_class(Class)
        runtime = get_runtime()
        why = runtime.supervision.dead(self._table.id, self._shape.ndslice)
        if why is not None:
            raise SupervisionError(f"cannot spawn {name} on proc mesh {self._table.name}: {why}")
        key = f"{name}-{uuid.uuid4().hex[:12]}"
        frames = encode((Class, args, kwargs, {"proc_mesh": self._known()}))
        mesh: ActorMesh[A] = ActorMesh(Class, key, name, self, self._shape, is_async)
        owner = runtime.supervision.adopt(mesh, "actor")
        header = {
            "op": "spawn",
            "async": is_async,
            "o": runtime.address,
            "oa": owner,
            "t": self._table.id,
        }
        started = _Gather(runtime, len(self._shape), "all", self._shape)
        mesh._started = started.result
        mesh._cast_message(self._shape, header, frames, started, None)
        return mesh  # type: ignore[return-value]

    def _known(self) -> ProcMesh | None:
        """This mesh, where it can be pickled now (refs elsewhere, or started)."""
        return self if self._table.ready and self._table.failure is None else None

    def stop(self, reason: str = "stopped by client") -> Future[None]:
        """Stop every actor (running ``__cleanup__``) and every process of this mesh."""
        from ._controller import stop_procs

        return stop_procs(self, reason)

    @property
    def initialized(self) -> Future[bool]:
        from ._controller import when_started

        return when_started(self._table)

    @property
    def host_mesh(self) -> HostMesh:
        if len(self._shape) != 1 or self._host is None:
            raise RuntimeError("host_mesh is only known for a one-process mesh spawned here")
        return self._host

    async def logging_option(
        self,
        stream_to_client: bool = False,
        aggregate_window_sec: int | None = None,
        level: int = 20,
    ) -> None:
        """Stream the processes' stdout and stderr to this script, tagged with rank."""
        from ._controller import set_logging

        if not 0 <= level <= 255:
            raise ValueError(f"level must be in 0..255, got {level}")
        await set_logging(self, stream_to_client, aggregate_window_sec, level)

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
    """One actor per process of a proc mesh; its endpoints are attributes."""

    def __init__(
        self, cls: type[A], key: str, name: str, procs: ProcMesh, shape: Shape, is_async: bool
    ) -> None:
        self._class = cls
        self._key = key
        self._name = name
        self._procs = procs
        self._shape = shape
        self._is_async = is_async
        self._started: concurrent.futures.Future[Any] | None = None  # where it was spawned

    def _new_with_shape(self, shape: Shape) -> ActorMesh[A]:
        mesh = ActorMesh(self._class, self._key, self._name, self._procs, shape, self._is_async)
        mesh._started = self._started
        return mesh

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in (
            "_class",
            "_key",
            "_name",
            "_procs",
            "_shape",
            "_is_async",
            "_started",
        ):
            raise AttributeError(name)
        attr = getattr(self._class, name, None)
        if isinstance(attr, EndpointProperty):
            return ActorEndpoint(self, attr)
        if callable(attr):
            return _NotAnEndpoint(self, name)
        raise AttributeError(f"{self._class.__qualname__} actor mesh has no endpoint {name!r}")

    def _cast_message(
        self,
        shape: Shape,
        header: dict[str, Any],
        frames: Frames,
        gather: _Gather | None,
        port: Port[Any] | None,
    ) -> None:
        runtime = get_runtime()
        table = self._procs._table
        header.update({"k": "c", "a": self._key, "n": self._name})
        if port is not None:
            header["p"] = [port._address, port._pid]
        why = runtime.supervision.dead(self._key, shape.ndslice)
        if why is not None and header["op"] == "call":
            error = SupervisionError(
                f"Endpoint call {self._name}.{header['m']}() failed, the actor mesh "
                f"{self._name} has status: {why}"
            )
            if gather is None:
                raise error
            gather.fail(error)
            return

        def go() -> None:
            addresses = [table.addresses[rank] or "" for rank in shape.ndslice]
            if gather is not None:
                header["p"] = gather.open(addresses)
            runtime.cast(shape, addresses, header, frames)

        runtime.call_soon(table.when_ready, go)

    def stop(self, reason: str = "stopped by client") -> Future[None]:
        """Stop these actors (their ``__cleanup__`` runs); their processes stay."""
        runtime = get_runtime()
        if len(self._shape) == len(self._procs._shape):
            runtime.supervision.stopping(self._key, reason)
        gather = _Gather(runtime, len(self._shape), "all", self._shape)
        self._cast_message(
            self._shape, {"op": "stop", "m": "stop", "why": reason}, encode(None), gather, None
        )
        done: Future[Any] = Future._of(gather.result)
        return done

    @property
    def initialized(self) -> Future[None]:
        """Resolves once every actor's ``__init__`` returned; raises the error
        of one that raised (or of a process that died while spawning)."""
        if self._started is None:  # a reference received from elsewhere
            return Future._done(None)
        done: concurrent.futures.Future[None] = concurrent.futures.Future()

        def settle(started: concurrent.futures.Future[Any]) -> None:
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
            (self._class, self._key, self._name, self._procs, self._shape, self._is_async),
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
_ids = itertools.count()


def this_proc() -> ProcMesh:
    """The one-process mesh of the calling process (the controller's own in a script)."""
    runtime = get_runtime()
    mesh = _singletons.get(runtime.address)
    if mesh is None:
        table = ProcTable(f"proc-{runtime.address}", "local", 1, [runtime.address])
        mesh = _singletons[runtime.address] = ProcMesh(table, Shape.unity())
    return mesh


def this_host() -> HostMesh:
    """The host this code runs on, as a mesh with no dimensions."""
    from ._host_agent import local_agent

    return HostMesh(Shape.unity(), [local_agent])


def as_endpoint(
    method: Any, *, propagate: Any = None, explicit_response_port: bool = False
) -> ActorEndpoint[Any]:
    """An endpoint with every adverb for a method that is not marked
    ``@endpoint``: ``as_endpoint(mesh.plain_method).call()``."""
    if not isinstance(method, _NotAnEndpoint):
        raise ValueError(
            f"as_endpoint() takes a method of an actor mesh that is not an endpoint "
            f"(mesh.some_method), got {method!r}"
        )
    function = getattr(method._cls, method._name)
    prop = EndpointProperty(function, propagate, explicit_response_port)
    if method._mesh._is_async != prop.is_async and not method._mesh._is_async:
        raise ValueError(f"{method._name} is async but {method._cls.__qualname__} is a sync actor")
    return ActorEndpoint(method._mesh, prop, plain=True)
