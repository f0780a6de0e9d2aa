"""The random number generators of every process of the active mesh, from
the controller: seed them, save their state as distributed tensors and
restore it (CPU, and each CUDA device where the processes have GPUs).
"""

from __future__ import annotations

import torch

from .._remote import remote

__all__ = [
    "get_rng_state_all_cuda_remote",
    "get_rng_state_remote",
    "manual_seed_all_cuda_remote",
    "manual_seed_cuda_remote",
    "random_seed_remote",
    "seed_remote",
    "set_manual_seed_remote",
    "set_rng_state_all_cuda_remote",
    "set_rng_state_remote",
]


def _manual_seed(seed: int, process_idx: int = 0) -> None:
    torch.manual_seed(seed ^ process_idx)


def _get_rng_state() -> torch.Tensor:
    return torch.get_rng_state()


def _set_rng_state(new_state: torch.Tensor) -> None:
    torch.set_rng_state(new_state)


def _seed() -> None:
    torch.seed()


def _random_seed() -> None:
    torch.random.seed()


def _cuda_manual_seed(seed: int) -> None:
    torch.cuda.manual_seed(seed)


def _cuda_manual_seed_all(seed: int) -> None:
    torch.cuda.manual_seed_all(seed)


def _cuda_get_rng_state_all() -> list[torch.Tensor]:
    return list(torch.cuda.get_rng_state_all())


def _cuda_set_rng_state_all(states: list[torch.Tensor]) -> None:
    torch.cuda.set_rng_state_all(states)


def _state_like() -> torch.Tensor:
    return torch.empty(torch.get_rng_state().shape, dtype=torch.uint8)


set_manual_seed_remote = remote(_manual_seed, propagate="inspect")
"""``set_manual_seed_remote(seed, process_idx=0)``: seed each process's CPU
generator (and every CUDA device's) with ``seed ^ process_idx``; give each
process its own ``process_idx`` (say, a rank tensor's value) for different
streams of numbers."""

get_rng_state_remote = remote(_get_rng_state, propagate=_state_like)
"""``get_rng_state_remote()``: each process's CPU generator state, as a
distributed ``uint8`` tensor (``torch.get_rng_state`` there)."""

set_rng_state_remote = remote(_set_rng_state, propagate="inspect")
"""``set_rng_state_remote(state)``: restore each process's CPU generator from
its shard of ``state`` (from ``get_rng_state_remote``)."""

seed_remote = remote(_seed, propagate="inspect")
"""``seed_remote()``: seed each process's generators from a nondeterministic
source (``torch.seed`` there)."""

random_seed_remote = remote(_random_seed, propagate="inspect")
"""``random_seed_remote()``: ``torch.random.seed`` on each process (the same
as ``seed_remote``)."""

manual_seed_cuda_remote = remote(_cuda_manual_seed, propagate="inspect")
"""``manual_seed_cuda_remote(seed)``: seed the current CUDA device's
generator on each process (``torch.cuda.manual_seed``)."""

manual_seed_all_cuda_remote = remote(_cuda_manual_seed_all, propagate="inspect")
"""``manual_seed_all_cuda_remote(seed)``: seed every CUDA device's generator
on each process (``torch.cuda.manual_seed_all``)."""

get_rng_state_all_cuda_remote = remote(_cuda_get_rng_state_all)
"""``get_rng_state_all_cuda_remote()``: a list with each CUDA device's
generator state, as distributed tensors (``torch.cuda.get_rng_state_all``);
the list's length is found by running it once on the first process."""

set_rng_state_all_cuda_remote = remote(_cuda_set_rng_state_all, propagate="inspect")
"""``set_rng_state_all_cuda_remote(states)``: restore every CUDA device's
generator on each process from ``get_rng_state_all_cuda_remote``'s list."""
