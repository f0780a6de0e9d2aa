"""Monarch in Python: the public API of Meta's Monarch, re-exported from the
packages that implement it (``monarch_mesh``, ``monarch_transport``,
``monarch_actor``). Scripts written for Monarch import from here unchanged.

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
        Remote,
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
    )

__all__ = [
    "Borrow",
    "DeviceMesh",
    "Extent",
    "Future",
    "MeshSliceTensor",
    "NDSlice",
    "Point",
    "Remote",
    "RemoteTensorError",
    "Selection",
    "Shape",
    "Slice",
    "Stream",
    "Tensor",
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
    "to_mesh",
]

# distributed tensors (monarch-tensor, which imports torch): loaded on first use, as in Monarch
_TENSOR_NAMES = frozenset(__all__) - set(globals())

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name in _TENSOR_NAMES:
        import monarch_tensor

        value = getattr(monarch_tensor, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'monarch' has no attribute {name!r}")
