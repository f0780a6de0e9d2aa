"""CUDA on real processes: each process on its own GPU, CUDA and CPU tensors
reduced in one mesh, gradients on the GPU, recovery from a CUDA allocation
that cannot fit. Run where a GPU is (``tools/gpu-check``)."""

from __future__ import annotations

import os

import pytest
import torch

import monarch_config
from monarch_actor import Actor, endpoint, this_host
from monarch_tensor import RemoteTensorError, fetch_shard, reduce, remote

pytestmark = pytest.mark.gpu


class Where(Actor):
    """Says which GPU its process computes on."""

    @endpoint
    def gpu(self) -> tuple[str | None, int, str, int]:
        device = torch.cuda.current_device()
        return (
            os.environ.get("CUDA_VISIBLE_DEVICES"),
            torch.cuda.device_count(),
            torch.cuda.get_device_properties(device).pci_bus_id,  # type: ignore[attr-defined]
            device,
        )


def all_sum(x: torch.Tensor, group) -> torch.Tensor:
    """A remote function using the mesh's process group directly."""
    out = x.clone()
    torch.distributed.all_reduce(out, group=group)
    return out


def _gpus() -> int:
    return torch.cuda.device_count()


def test_each_process_computes_on_its_own_gpu():
    count = _gpus()
    procs = this_host().spawn_procs({"gpus": count}, name="placed")
    try:
        found = procs.spawn("where", Where).gpu.call().get(timeout=120)
        buses = set()
        for point, (visible, seen, bus, device) in found.items():
            assert (visible, seen, device) == (str(point["gpus"]), 1, 0)
            buses.add(bus)
        assert len(buses) == count  # as many physical GPUs as processes
    finally:
        procs.stop().get(timeout=60)


def test_more_processes_than_gpus_is_refused_unless_shared():
    count = _gpus()
    with pytest.raises(ValueError, match=f"has {count} GPU"):
        this_host().spawn_procs({"gpus": count + 1})
    with monarch_config.configured(share_gpus=True):
        procs = this_host().spawn_procs({"gpus": count + 1}, name="shared")
    try:
        found = procs.spawn("where", Where).gpu.call().get(timeout=120)
        assert {visible for visible, *_ in found.values()} == {str(i) for i in range(count)}
    finally:
        procs.stop().get(timeout=60)


@pytest.fixture(scope="module")
def shared():
    """Two processes on (at least) one GPU: collectives over CUDA tensors use gloo."""
    with monarch_config.configured(share_gpus=True):
        mesh = this_host().spawn_procs({"gpus": 2}, name="two")
    yield mesh
    mesh.stop().get(timeout=60)


def test_cuda_and_cpu_tensors_reduce_in_one_mesh(shared):
    with shared.activate() as mesh:
        on_gpu = torch.ones(4, device="cuda") * (mesh.rank("gpus") + 1)
        on_cpu = torch.ones(3) * (mesh.rank("gpus") + 1)
        gpu_sum = reduce(on_gpu, "gpus")
        cpu_sum = reduce(on_cpu, "gpus")
        group = mesh.process_group("gpus")
        via_cpu = remote(all_sum, propagate=lambda x, group: x)(on_cpu, group)
        via_gpu = remote(all_sum, propagate=lambda x, group: x)(on_gpu, group)
    for g in range(2):
        got = fetch_shard((gpu_sum, cpu_sum, via_cpu, via_gpu), gpus=g).get(timeout=120)
        assert got[0].device.type == "cpu"  # fetched shards come back to the controller's CPU
        assert got[0].tolist() == [3.0] * 4 and got[1].tolist() == [3.0] * 3
        assert got[2].tolist() == [3.0] * 3 and got[3].tolist() == [3.0] * 4


@pytest.mark.gpu(2)
def test_nccl_reduces_cuda_tensors_across_gpus():
    procs = this_host().spawn_procs({"gpus": 2}, name="nccl")
    try:
        with procs.activate() as mesh:
            x = torch.ones(1 << 20, device="cuda") * (mesh.rank("gpus") + 1)
            total = reduce(x, "gpus")
            on_cpu = reduce(torch.ones(2) * (mesh.rank("gpus") + 1), "gpus")
        for g in range(2):
            got, cpu = fetch_shard((total, on_cpu), gpus=g).get(timeout=120)
            assert torch.all(got == 3) and cpu.tolist() == [3.0, 3.0]
    finally:
        procs.stop().get(timeout=60)


def test_gradients_on_the_gpu_equal_local_autograd(shared):
    with shared.activate():
        w = torch.rand(5, device="cuda", requires_grad=True)
        (w * w).sum().backward()
        grad = w.grad
    for g in range(2):
        got_w, got_grad = fetch_shard((w, grad), gpus=g).get(timeout=120)
        assert torch.allclose(got_grad, 2 * got_w.detach())


def test_a_cuda_allocation_that_cannot_fit_fails_clearly_and_the_mesh_goes_on(shared):
    total = torch.cuda.get_device_properties(0).total_memory
    with shared.activate():
        too_big = torch.empty(4 * total, dtype=torch.uint8, device="cuda")
        after = torch.ones(2, device="cuda") + 1
    with pytest.raises(RemoteTensorError, match=r"OutOfMemoryError|out of memory"):
        fetch_shard(too_big, gpus=0).get(timeout=120)
    assert fetch_shard(after, gpus=1).get(timeout=120).tolist() == [2.0, 2.0]
