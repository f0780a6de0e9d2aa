"""Which GPU each process uses. Processes along a ``gpus`` (or ``gpu``)
dimension of a proc mesh each get the GPU of their index along it, as
Monarch's tensor engine places its workers: ``CUDA_VISIBLE_DEVICES`` names
that one GPU, so it is the process's ``cuda:0`` whatever thread runs, and
NCCL sees one rank per GPU."""

from __future__ import annotations

import math
import os
import re

__all__ = [
    "GPU_DIMS",
    "HOST_GPUS_ENV",
    "GpuPlacementError",
    "gpu_dimension",
    "has_own_gpu",
    "host_gpus",
    "place_on_gpus",
]

GPU_DIMS = ("gpus", "gpu")  # Monarch's names for the per-host GPU dimension, in its order
# How many GPUs the process's host has (it sees one); monarch-transport declares it as
# its `host_gpus` setting (whether CUDA tensors may move by IPC), this sets it.
HOST_GPUS_ENV = "MONARCH_HOST_GPUS"
SHARED_GPU_ENV = "MONARCH_SHARED_GPU"  # "1": other processes of the mesh use this GPU too
_DEVICE_NODE = re.compile(r"nvidia(\d+)")


class GpuPlacementError(ValueError):
    """A host was asked for more processes along a GPU dimension than it has GPUs."""


def host_gpus() -> list[str]:
    """The GPUs this host lends its processes, as ``CUDA_VISIBLE_DEVICES``
    names them: that variable's entries where it is set (CUDA ignores an
    entry such as ``-1`` and everything after it), else one per
    ``/dev/nvidiaN`` device node. Counted without initialising CUDA, which
    a process that forks others must not do."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        found = []
        for entry in (part.strip() for part in visible.split(",")):
            if not entry or entry.startswith("-"):
                break
            found.append(entry)
        return found
    try:
        nodes = os.listdir("/dev")
    except OSError:
        return []
    numbers = (match.group(1) for name in nodes if (match := _DEVICE_NODE.fullmatch(name)))
    return sorted(numbers, key=int)


def gpu_dimension(per_host: dict[str, int]) -> str | None:
    """The per-host dimension whose index picks a GPU, if any."""
    return next((name for name in GPU_DIMS if name in per_host), None)


def place_on_gpus(
    per_host: dict[str, int], gpus: list[str], *, share: bool, mesh: str, host: str, host_index: int
) -> list[dict[str, str]]:
    """Per process of one host (row-major over ``per_host``), the environment
    that puts it on its GPU: empty where there is nothing to place (no GPU
    dimension, or a host without GPUs, where the processes compute on CPU).

    Raises:
        GpuPlacementError: the GPU dimension is longer than the host has GPUs
            and ``share`` is off.
    """
    local = math.prod(per_host.values())
    dim = gpu_dimension(per_host)
    if dim is None or not gpus:
        return [{} for _ in range(local)]
    size = per_host[dim]
    if size > len(gpus) and not share:
        raise GpuPlacementError(
            f"proc mesh {mesh!r}: host {host} has {len(gpus)} GPU"
            f"{'' if len(gpus) == 1 else 's'} ({', '.join(gpus)}) but {size} processes were "
            f"asked along {dim!r}, one GPU each. Ask for at most {len(gpus)} along {dim!r}; "
            "name the dimension otherwise (e.g. 'procs') for processes that need no GPU of "
            "their own; or, to test on fewer GPUs, set configure(share_gpus=True) "
            "(MONARCH_SHARE_GPUS=1) to run several processes on each GPU"
        )
    names = list(per_host)
    stride = math.prod(per_host[name] for name in names[names.index(dim) + 1 :])
    # several processes on one GPU: along the GPU dimension past the host's count,
    # or along the other per-host dimensions (as in Monarch, they take the same index)
    shared = {SHARED_GPU_ENV: "1"} if size > len(gpus) or local > size else {}
    return [
        {
            "CUDA_VISIBLE_DEVICES": gpus[((rank // stride) % size) % len(gpus)],
            "NCCL_HOSTID": f"{mesh}_host_{host_index}",
            HOST_GPUS_ENV: str(len(gpus)),
            **shared,
        }
        for rank in range(local)
    ]


def has_own_gpu() -> bool:
    """Whether this process was placed on a GPU no other process of its mesh
    uses: then NCCL can carry its CUDA tensors (it refuses two ranks on one GPU)."""
    return HOST_GPUS_ENV in os.environ and SHARED_GPU_ENV not in os.environ
