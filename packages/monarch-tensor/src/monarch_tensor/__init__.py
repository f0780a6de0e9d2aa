"""Distributed tensors for Monarch in Python: ``with proc_mesh.activate():``
makes torch operations run on every process of the mesh, each on its own
shard, driven from this script without waiting; ``fetch_shard`` brings a
shard back, and ``reduce`` combines shards along named mesh dimensions
(torch.distributed gloo groups, made per set of dimensions).

Re-exported at the top of ``monarch`` as in Meta's Monarch.
"""

from ._engine import (
    DeviceMesh,
    Tensor,
    fetch_shard,
    get_active_mesh,
    inspect,
    no_mesh,
    reduce,
    reduce_,
    show,
)
from ._errors import RemoteTensorError

__all__ = [
    "DeviceMesh",
    "RemoteTensorError",
    "Tensor",
    "fetch_shard",
    "get_active_mesh",
    "inspect",
    "no_mesh",
    "reduce",
    "reduce_",
    "show",
]
