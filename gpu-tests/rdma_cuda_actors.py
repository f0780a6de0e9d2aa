"""The owner the CUDA RDMA tests spawn in another process (importable by the
procs by this unique module name): CUDA tensors behind ``RDMABuffer``s."""

import hashlib
import os

import torch

from monarch_actor import Actor, endpoint
from monarch_rdma import RDMABuffer


def pattern(size: int, seed: int = 0) -> torch.Tensor:
    """``size`` deterministic, position-dependent bytes (a CPU uint8 tensor)."""
    positions = torch.arange(size, dtype=torch.int64)
    return ((positions * 131 + seed * 17 + (positions >> 8)) % 251).to(torch.uint8)


def digest(tensor: torch.Tensor) -> str:
    return hashlib.sha256(tensor.cpu().numpy().tobytes()).hexdigest()


class CudaOwner(Actor):
    def __init__(self) -> None:
        self.tensors: dict[str, torch.Tensor] = {}
        self.buffers: dict[str, RDMABuffer] = {}

    @endpoint
    def make(self, name: str, size: int, seed: int = 0) -> RDMABuffer:
        tensor = pattern(size, seed).to("cuda")
        torch.cuda.synchronize()
        self.tensors[name] = tensor
        self.buffers[name] = RDMABuffer(tensor)
        return self.buffers[name]

    @endpoint
    def digest(self, name: str) -> str:
        torch.cuda.synchronize()
        return digest(self.tensors[name])

    @endpoint
    def drop(self, name: str) -> None:
        """Release the buffer (and the tensor): no transfer may touch it after."""
        self.buffers.pop(name).drop().get(timeout=30)
        self.tensors.pop(name)

    @endpoint
    def opened(self) -> int:
        """How many peer storages this owner holds open for cuda_ipc copies."""
        from monarch_rdma import _cuda_ipc

        return sum(len(state.opened) for state in list(_cuda_ipc._connections.values()))

    @endpoint
    def fill(self, name: str, value: int) -> None:
        """Every byte of ``name`` becomes ``value`` (completed when this returns)."""
        self.tensors[name].fill_(value)
        torch.cuda.synchronize()

    @endpoint
    def pid(self) -> int:
        return os.getpid()
