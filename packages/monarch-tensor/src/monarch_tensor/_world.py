"""``world_mesh``: a device mesh of ``gpu_per_host`` processes on each of
some hosts, with dimensions ``("host", "gpu")``."""

from __future__ import annotations

from collections.abc import Sequence

from monarch_actor import HostMesh, attach_to_workers

from ._mesh import DeviceMesh, device_mesh

__all__ = ["world_mesh"]


def world_mesh(ctx: object, hosts: HostMesh | Sequence[str], gpu_per_host: int) -> DeviceMesh:
    """A device mesh of ``gpu_per_host`` new processes on every one of ``hosts``,
    with dimensions ``("host", "gpu")``; each process of the ``gpu`` dimension
    uses the GPU of its index there, where the host has GPUs.

    Args:
        ctx: where Monarch passes its supervisor's context. Here the hosts are
            already running (``hosts`` says where), so it must be ``None``.
        hosts: a host mesh (``this_host()``, ``attach_to_workers(...)``, a job's
            ``state().hosts``), or the addresses of running workers
            (``run_worker_loop_forever``), attached here with the job's secret.
        gpu_per_host: how many processes to start on each host.

    Returns:
        The device mesh; ``with mesh.activate():`` runs tensor work on it.

    Raises:
        TypeError: ``ctx`` is not ``None``, or ``hosts`` is neither a host mesh nor
            a list of addresses.
        ValueError: ``gpu_per_host`` is not an int of at least 1, or ``hosts`` is
            an empty list.
    """
    if ctx is not None:
        raise TypeError(
            "world_mesh(ctx, ...): there is no supervisor context here; pass None and "
            "give the hosts as a host mesh or worker addresses"
        )
    if isinstance(gpu_per_host, bool) or not isinstance(gpu_per_host, int) or gpu_per_host < 1:
        raise ValueError(f"gpu_per_host must be an int >= 1, got {gpu_per_host!r}")
    if isinstance(hosts, HostMesh):
        host_mesh = hosts
    elif isinstance(hosts, Sequence) and not isinstance(hosts, str):
        if not hosts:
            raise ValueError("world_mesh() needs at least one host")
        host_mesh = attach_to_workers(workers=list(hosts))
    else:
        raise TypeError(
            f"world_mesh() takes a HostMesh or a list of worker addresses, got "
            f"{type(hosts).__name__}"
        )
    labels = list(host_mesh.sizes)
    if len(labels) > 1:
        host_mesh = host_mesh.flatten("host")
    elif labels and labels[0] != "host":
        host_mesh = host_mesh.rename(**{labels[0]: "host"})
    procs = host_mesh.spawn_procs(per_host={"gpu": gpu_per_host}, name="world")
    if not labels:  # a host mesh of no dimensions: one host
        procs = procs.split(gpu=("host", "gpu"), host=1)
    return device_mesh(procs)
