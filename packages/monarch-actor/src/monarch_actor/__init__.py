"""The actor runtime of Monarch in Python.

Actors live in meshes of processes; endpoints are called on whole meshes or
slices of them; replies come back as futures.

Examples:
    >>> from monarch_actor import Actor, endpoint, this_proc
    >>> class Greeter(Actor):
    ...     @endpoint
    ...     def greet(self, name: str) -> str:
    ...         return f"hello, {name}"
    >>> greeter = this_proc().spawn("greeter", Greeter)
    >>> greeter.greet.call_one("world").get()
    'hello, world'
"""

from monarch_mesh import Extent, Point

from . import (
    _boot,  # noqa: F401  (wires the layers: the controller starts on first use)
    config,
)
from ._api.accumulator import Accumulator
from ._api.actor import Actor, EndpointProperty, concurrent_endpoint, endpoint
from ._api.context import (
    Context,
    Instance,
    context,
    current_actor_name,
    current_rank,
    current_size,
)
from ._api.endpoint import ActorEndpoint, send
from ._api.hosts import attach, attach_to_workers
from ._api.mesh import ActorMesh, HostMesh, ProcMesh, as_endpoint, this_host, this_proc
from ._api.proc_control import shutdown_context
from ._api.returns_future import returns_future
from ._api.singletons import get_or_spawn_controller
from ._api.value_mesh import ValueMesh
from ._boot import (
    run_worker_loop_forever,
    run_worker_loop_until_shutdown,
    start_worker_loop_forever,
)
from ._core.errors import ActorError, MonarchError, SupervisionError
from ._core.future import Future
from ._core.ids import ProcId, Uid
from ._core.ports import Channel, Port, PortReceiver, RankedPortReceiver
from ._debugger.controller import DebugController, DebugSessionInfo, debug_controller
from ._debugger.protocol import DebugClient, DebugConnectionError
from ._procs.bootstrap import BootstrapCommand, default_bootstrap_cmd
from ._supervision.faults import MeshFailure, unhandled_fault_hook
from ._telemetry.spans import get_meter, span, traced

Endpoint = ActorEndpoint
"""Monarch's name for ``ActorEndpoint``."""

__all__ = [
    "attach",
    "attach_to_workers",
    "run_worker_loop_forever",
    "run_worker_loop_until_shutdown",
    "start_worker_loop_forever",
    "Accumulator",
    "Actor",
    "ActorEndpoint",
    "ActorError",
    "ActorMesh",
    "BootstrapCommand",
    "Channel",
    "Context",
    "DebugClient",
    "DebugConnectionError",
    "DebugController",
    "DebugSessionInfo",
    "Endpoint",
    "EndpointProperty",
    "Extent",
    "Future",
    "HostMesh",
    "Instance",
    "MeshFailure",
    "MonarchError",
    "Point",
    "Port",
    "PortReceiver",
    "ProcId",
    "ProcMesh",
    "RankedPortReceiver",
    "SupervisionError",
    "Uid",
    "ValueMesh",
    "as_endpoint",
    "concurrent_endpoint",
    "config",
    "context",
    "current_actor_name",
    "current_rank",
    "current_size",
    "debug_controller",
    "default_bootstrap_cmd",
    "endpoint",
    "get_meter",
    "get_or_spawn_controller",
    "returns_future",
    "send",
    "shutdown_context",
    "span",
    "this_host",
    "this_proc",
    "traced",
    "unhandled_fault_hook",
]

__version__ = "0.1.0"
