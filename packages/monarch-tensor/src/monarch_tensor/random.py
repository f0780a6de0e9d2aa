"""Random number state of the processes of the active mesh, as distributed
tensors (Monarch's ``monarch.random``): save it, restore it, derive a new
state from a seed, and ask for deterministic algorithms.

A process without CUDA has an empty CUDA state: the CPU state alone is
saved and restored.
"""

from __future__ import annotations

import os
from typing import NamedTuple

import torch

from ._remote import remote
from ._tensor import Tensor

__all__ = ["State", "get_state", "make_deterministic", "new_state", "set_state"]


class State(NamedTuple):
    """The random state of every process: distributed ``uint8`` tensors.

    Attributes:
        cpu: each process's CPU generator state.
        cuda: each process's current CUDA device generator state (empty without CUDA).
    """

    cpu: Tensor
    cuda: Tensor


def _cuda_state() -> torch.Tensor:
    if torch.cuda.is_available():
        return torch.cuda.get_rng_state()
    return torch.empty(0, dtype=torch.uint8)


def _read_state() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.get_rng_state(), _cuda_state()


def _write_state(state: tuple[torch.Tensor, torch.Tensor]) -> None:
    cpu, cuda = state
    torch.set_rng_state(cpu)
    if cuda.numel():
        torch.cuda.set_rng_state(cuda)


def _seed_from(seed: torch.Tensor | int) -> None:
    torch.manual_seed(int(seed.item()) if isinstance(seed, torch.Tensor) else int(seed))


def _deterministic() -> None:
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    # what deterministic cuBLAS needs (see torch.use_deterministic_algorithms)
    os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"


# the CUDA state's size depends on the processes: found by running it once there
_get_state = remote(_read_state)
_set_state = remote(_write_state, propagate="inspect")
_manual_seed = remote(_seed_from, propagate="inspect")
_make_deterministic = remote(_deterministic, propagate="inspect")


def get_state() -> State:
    """The random state of every process of the active mesh, now (in stream order).

    Returns:
        The CPU and CUDA generator states, as distributed tensors.

    Raises:
        ValueError: no mesh is active.
    """
    cpu, cuda = _get_state()
    return State(cpu, cuda)


def set_state(state: State | tuple[Tensor, Tensor]) -> None:
    """Restore every process's random state from ``get_state``'s tensors.

    Args:
        state: a ``State`` (or a ``(cpu, cuda)`` pair) of distributed tensors.

    Raises:
        ValueError: no mesh is active.
    """
    _set_state(tuple(state))


def new_state(seed: Tensor | int) -> State:
    """The state each process's generators have after seeding with ``seed``,
    leaving their current state as it was.

    Args:
        seed: a distributed integer scalar (say, a rank tensor, for a state per
            process), or a plain integer (the same state everywhere).

    Returns:
        The seeded state, to pass to ``set_state`` later.

    Raises:
        ValueError: no mesh is active.
    """
    before = get_state()
    _manual_seed(seed)
    seeded = get_state()
    set_state(before)
    return seeded


def make_deterministic() -> None:
    """Ask every process of the active mesh for deterministic algorithms: torch's
    ``use_deterministic_algorithms(True)``, deterministic cuDNN without
    benchmarking, and the cuBLAS workspace setting that needs.

    Raises:
        ValueError: no mesh is active.
    """
    _make_deterministic()
