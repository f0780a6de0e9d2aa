"""Distributed tensors for Monarch in Python: ``with proc_mesh.activate():``
makes torch operations run on every process of the mesh, each on its own
shard, driven from this script without waiting. ``fetch_shard`` brings a
shard back; ``reduce`` combines shards along named mesh dimensions
(torch.distributed groups made per set of dimensions: gloo on CPU, NCCL on
GPU); ``to_mesh`` moves them to another mesh; ``remote`` runs your own
functions there (``builtins`` has ready-made ones for logging and random
state); ``OpaqueRef`` keeps any Python object on the processes; streams let
communication overlap computation.

Re-exported at the top of ``monarch`` as in Meta's Monarch; the modules
``builtins``, ``random``, ``timer`` and ``gradient`` are Monarch's
``monarch.builtins``, ``monarch.random``, ``monarch.timer`` and
``monarch.gradient``.
"""

from ._active import no_mesh
from ._collectives import reduce, reduce_, slice_mesh, to_mesh
from ._errors import RemoteTensorError
from ._fetch import fetch_shard, inspect, show
from ._grad import grad_function, grad_generator
from ._mesh import DeviceMesh, RemoteProcessGroup, coalescing
from ._opaque import OpaqueRef
from ._remote import Remote, call_on_shard_and_fetch, remote
from ._tensor import Borrow, MeshSliceTensor, Stream, Tensor, get_active_mesh, get_active_stream
from ._world import world_mesh

__all__ = [
    "Borrow",
    "DeviceMesh",
    "MeshSliceTensor",
    "OpaqueRef",
    "Remote",
    "RemoteProcessGroup",
    "RemoteTensorError",
    "Stream",
    "Tensor",
    "call_on_shard_and_fetch",
    "coalescing",
    "fetch_shard",
    "get_active_mesh",
    "get_active_stream",
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
    "world_mesh",
]
