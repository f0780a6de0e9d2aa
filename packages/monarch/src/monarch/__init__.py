"""Monarch in Python: the public API of Meta's Monarch, re-exported from the
packages that implement it (``monarch_mesh``, ``monarch_transport``,
``monarch_actor``, ``monarch_tensor``). Scripts written for Monarch import
from here unchanged.

Examples:
    >>> from monarch.actor import Actor, endpoint, this_proc
    >>> class Echo(Actor):
    ...     @endpoint
    ...     def echo(self, value: int) -> int:
    ...         return value
    >>> this_proc().spawn("echo", Echo).echo.call_one(7).get()
    7
"""

from typing import TYPE_CHECKING, Any

from monarch_actor import Future
from monarch_actor import Future as ActorFuture
from monarch_config import (
    clear_runtime_config,
    configure,
    configured,
    get_global_config,
    get_runtime_config,
)
from monarch_mesh import Extent, NDSlice, Point, Selection, Shape, Slice

if TYPE_CHECKING:  # for type checkers and the API reference; at run time, __getattr__
    from monarch_tensor import (
        Borrow,
        DeviceMesh,
        MeshSliceTensor,
        OpaqueRef,
        Remote,
        RemoteProcessGroup,
        RemoteTensorError,
        Stream,
        Tensor,
        call_on_shard_and_fetch,
        coalescing,
        fetch_shard,
        get_active_mesh,
        get_active_stream,
        grad_function,
        grad_generator,
        inspect,
        no_mesh,
        reduce,
        reduce_,
        remote,
        show,
        slice_mesh,
        to_mesh,
        world_mesh,
    )

    from . import builtins, timer

__all__ = [
    "ActorFuture",
    "Borrow",
    "DeviceMesh",
    "Extent",
    "Future",
    "MeshSliceTensor",
    "NDSlice",
    "OpaqueRef",
    "Point",
    "Remote",
    "RemoteProcessGroup",
    "RemoteTensorError",
    "Selection",
    "Shape",
    "Slice",
    "Stream",
    "Tensor",
    "builtins",
    "call_on_shard_and_fetch",
    "clear_runtime_config",
    "coalescing",
    "configure",
    "configured",
    "fetch_shard",
    "get_active_mesh",
    "get_active_stream",
    "get_global_config",
    "get_runtime_config",
    "grad_function",
    "grad_generator",
    "inspect",
    "no_mesh",
    "reduce",
    "reduce_",
    "remote",
    "show",
    "slice_mesh",
    "timer",
    "to_mesh",
    "world_mesh",
]

# modules of Monarch's ready-made remote functions and timers (they import torch)
_MODULES = frozenset({"builtins", "timer"})
# distributed tensors (monarch-tensor, which imports torch): loaded on first use, as in Monarch
_TENSOR_NAMES = frozenset(__all__) - set(globals()) - _MODULES

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name in _TENSOR_NAMES:
        import monarch_tensor

        value = getattr(monarch_tensor, name)
        globals()[name] = value
        return value
    if name in _MODULES:
        import importlib

        module = importlib.import_module(f"{__name__}.{name}")
        globals()[name] = module
        return module
    raise AttributeError(f"module 'monarch' has no attribute {name!r}")
